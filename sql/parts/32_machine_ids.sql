-- NICo MachineIds (SPEC 7, issue 22). NICo identifies hosts and DPUs by a
-- MachineId string, never a uuid, and stores it as varchar(64). Its parser
-- (crates/uuid/src/machine/mod.rs, `impl FromStr for MachineId`; the
-- commits read are listed in docs/nico-integration.md) accepts exactly:
--   1. 59 bytes (MACHINE_ID_LENGTH = 7 + 52), else "invalid length";
--   2. the prefix "fm100" ("fm" forge machine, "1" version, "00" reserved),
--      case-sensitive, else "invalid prefix";
--   3. 52 characters of BASE32_DNSSEC (RFC 5155: 0-9 a-v, decoded
--      case-insensitively, no padding) that decode to exactly 32 bytes with
--      the 4 trailing bits zero (data_encoding checks them), so the last
--      character is 0 or g; else "invalid encoding";
--   4. character 6 the machine type: d (DPU), h (host), p (predicted host);
--      character 7 the source: t (TPM), s (product/board/chassis serial);
--      else "invalid prefix".
-- NICo prints the id back through Display: the prefix, type, source and the
-- payload re-encoded in lowercase. That canonical text is what it binds (a
-- sqlx String) and what we store. A DPU argument must be a DPU id (NICo's
-- DpuMachineId), a host argument a host or predicted-host id (HostMachineId).

-- Why a string is not a MachineId, in the words of NICo's parser; NULL when it is one.
CREATE FUNCTION extsvc._machine_id_problem(p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
  RETURN CASE
      WHEN octet_length(p_value) <> 59 THEN format('the machine ID has an invalid length of %s', octet_length(p_value))
      WHEN left(p_value, 5) <> 'fm100' THEN 'the machine ID has an invalid prefix'
      WHEN substr(p_value, 8) !~ '^[0-9a-vA-V]{51}[0gG]$' THEN 'the machine ID has an invalid encoding'
      WHEN substr(p_value, 6, 1) NOT IN ('d', 'h', 'p') OR substr(p_value, 7, 1) NOT IN ('t', 's')
        THEN 'the machine ID has an invalid prefix'
    END;
END
$fn$;
COMMENT ON FUNCTION extsvc._machine_id_problem(text) IS
  'Internal: NULL when a string is a MachineId NICo''s parser accepts (fm100, type d/h/p, source t/s, 52 BASE32_DNSSEC characters decoding to 32 bytes); otherwise the parser''s reason. No grants.';

-- The canonical form of a MachineId (the payload in lowercase, as NICo prints it).
CREATE FUNCTION extsvc._machine_id_canonical(p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
  RETURN left(p_value, 7) || lower(substr(p_value, 8));
END
$fn$;
COMMENT ON FUNCTION extsvc._machine_id_canonical(text) IS
  'Internal: a parsed MachineId as NICo prints it (Display): prefix, type and source as given, the base32 payload in lowercase. No grants.';

-- A machine-id argument checked as NICo's parser checks it, returned in its
-- canonical form; 22023 naming the argument otherwise. p_kind: 'dpu' (type d)
-- or 'host' (types h and p). A string in the text form of a uuid that is
-- already stored (rows of a database upgraded from 0.2.0, whose machine ids
-- were uuids) is accepted as it is stored, so those rows stay reachable; no
-- new id of that form is accepted.
CREATE FUNCTION extsvc._machine_id(p_value text, p_arg text, p_kind text) RETURNS text
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  v_problem text;
  v_type text;
BEGIN
  IF p_value IS NULL THEN
    PERFORM extsvc._raise('22023', format('%s is required', p_arg),
      format('%s: %s is NULL', CASE WHEN p_arg LIKE '$%' THEN 'JSON path' ELSE 'argument' END, p_arg),
      format('Pass the %s''s NICo MachineId.', CASE p_kind WHEN 'dpu' THEN 'DPU' ELSE 'host' END));
  END IF;
  v_problem := extsvc._machine_id_problem(p_value);
  IF v_problem IS NULL THEN
    v_type := substr(p_value, 6, 1);
    IF (p_kind = 'dpu' AND v_type <> 'd') OR (p_kind = 'host' AND v_type NOT IN ('h', 'p')) THEN
      v_problem := format('a %s MachineId was expected, got a %s MachineId',
                          CASE p_kind WHEN 'dpu' THEN 'DPU (fm100d...)' ELSE 'host (fm100h... or fm100p...)' END,
                          CASE v_type WHEN 'd' THEN 'DPU' WHEN 'h' THEN 'host' ELSE 'predicted host' END);
    ELSE
      RETURN extsvc._machine_id_canonical(p_value);
    END IF;
  ELSIF p_value ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
        AND (EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = lower(p_value) OR d.host_machine_id = lower(p_value))
             OR EXISTS (SELECT FROM extsvc.instances i WHERE i.host_machine_id = lower(p_value))) THEN
    RETURN lower(p_value);   -- a 0.2.0 id kept by the upgrade
  END IF;
  PERFORM extsvc._raise('22023', format('%s is not a NICo MachineId', p_arg),
    format('%s: %s = %s: %s', CASE WHEN p_arg LIKE '$%' THEN 'JSON path' ELSE 'argument' END, p_arg,
           extsvc._token(p_value), v_problem),
    format('Pass the MachineId as NICo prints it: fm100%s<t|s> followed by 52 base32 characters (0-9, a-v), e.g. %s.',
           CASE p_kind WHEN 'dpu' THEN 'd' ELSE '<h|p>' END,
           CASE p_kind WHEN 'dpu' THEN 'fm100dsasb5dsh6e6ogogslpovne4rj82rp9jlf00qd7mcvmaadv85phk3g'
                       ELSE 'fm100htjtiaehv1n5vh67tbmqq4eabcjdng40f7jupsadbedhruh6rag1l0' END));
  RETURN NULL;  -- not reached
END
$fn$;
COMMENT ON FUNCTION extsvc._machine_id(text, text, text) IS
  'Internal: a machine-id argument as NICo''s MachineId parser accepts it, in canonical form (kind dpu: type d; host: types h and p), or 22023 naming the argument; the text form of a uuid only when a 0.2.0 row already holds it. No grants.';

-- The same for an array argument (network_dpus): elements named by position.
CREATE FUNCTION extsvc._machine_ids(p_values text[], p_arg text, p_kind text) RETURNS text[]
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  v_out text[] := '{}';
  n integer := 0;
  v text;
BEGIN
  IF p_values IS NULL THEN
    RETURN NULL;
  END IF;
  FOREACH v IN ARRAY p_values LOOP
    v_out := v_out || extsvc._machine_id(v, format('%s[%s]', p_arg, n), p_kind);
    n := n + 1;
  END LOOP;
  RETURN v_out;
END
$fn$;
COMMENT ON FUNCTION extsvc._machine_ids(text[], text, text) IS
  'Internal: extsvc._machine_id for every element of an array argument, each named by its position (network_dpus[0], ...). No grants.';

-- Public: what NICo's parser says of a string (operators, NICo's tests).
CREATE FUNCTION extsvc.parse_machine_id(machine_id text)
RETURNS TABLE (canonical text, machine_type text, source text, problem text)
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT CASE WHEN p.problem IS NULL THEN extsvc._machine_id_canonical(parse_machine_id.machine_id) END,
         CASE WHEN p.problem IS NULL THEN CASE substr(parse_machine_id.machine_id, 6, 1)
              WHEN 'd' THEN 'dpu' WHEN 'h' THEN 'host' ELSE 'predictedhost' END END,
         CASE WHEN p.problem IS NULL THEN CASE substr(parse_machine_id.machine_id, 7, 1)
              WHEN 't' THEN 'tpm' ELSE 'product_board_chassis_serial' END END,
         p.problem
    FROM (SELECT coalesce(extsvc._machine_id_problem(parse_machine_id.machine_id),
                          CASE WHEN parse_machine_id.machine_id IS NULL THEN 'the machine ID is NULL' END) AS problem) p
$fn$;
COMMENT ON FUNCTION extsvc.parse_machine_id(text) IS
  'NICo''s MachineId parser (crates/uuid/src/machine/mod.rs) in SQL: the canonical id, its machine_type as NICo''s MachineType::metrics_value names it (dpu, host, predictedhost) and source (tpm, product_board_chassis_serial: MachineIdSource''s variants), or the parser''s problem (length, prefix, encoding) and NULLs.';

REVOKE ALL ON FUNCTION
  extsvc._machine_id_problem(text),
  extsvc._machine_id_canonical(text),
  extsvc._machine_id(text, text, text),
  extsvc._machine_ids(text[], text, text),
  extsvc.parse_machine_id(text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION extsvc.parse_machine_id(text) TO extsvc_api, extsvc_admin;
