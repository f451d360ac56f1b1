-- Step 1 of every upgrade script (tools/sql_upgrade.py): drop every trigger
-- on the extension's tables and every view and function of the extension,
-- so that the definitions of sql/parts/*.sql are created again exactly as a
-- fresh install creates them (step 3). Tables, their rows, sequences and
-- the schema are kept; the hand-written migration (step 2) changes them.
-- Nothing is dropped with CASCADE: an object outside the extension that
-- depends on one of these (a view of your own over extsvc.services, a table
-- default calling an extsvc function) stops the upgrade with PostgreSQL's
-- own message, and the transaction changes nothing.
DO $drop_definitions$
DECLARE
  v_ext oid := (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'nico_extsvc');
  r record;
  v_pending text[];
  v_failed text[];
  v_cmd text;
  v_progress boolean;
  v_error text;
  v_detail text;
BEGIN
  FOR r IN SELECT format('DROP TRIGGER %I ON %I.%I', t.tgname, n.nspname, c.relname) AS cmd
             FROM pg_catalog.pg_trigger t
             JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid
                                        AND d.refclassid = 'pg_catalog.pg_extension'::regclass
                                        AND d.refobjid = v_ext AND d.deptype = 'e'
            WHERE NOT t.tgisinternal
            ORDER BY 1 LOOP
    EXECUTE r.cmd;
  END LOOP;

  SELECT coalesce(array_agg(cmd ORDER BY cmd), '{}') INTO v_pending FROM (
    SELECT format('DROP %s %I.%I', CASE c.relkind WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'VIEW' END,
                  n.nspname, c.relname) AS cmd
      FROM pg_catalog.pg_depend d
      JOIN pg_catalog.pg_class c ON c.oid = d.objid
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.refclassid = 'pg_catalog.pg_extension'::regclass
       AND d.refobjid = v_ext AND d.deptype = 'e' AND c.relkind IN ('v', 'm')
    UNION ALL
    SELECT format('DROP %s %I.%I(%s)', CASE p.prokind WHEN 'p' THEN 'PROCEDURE' WHEN 'a' THEN 'AGGREGATE' ELSE 'FUNCTION' END,
                  n.nspname, p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid))
      FROM pg_catalog.pg_depend d
      JOIN pg_catalog.pg_proc p ON p.oid = d.objid
      JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
     WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.refclassid = 'pg_catalog.pg_extension'::regclass
       AND d.refobjid = v_ext AND d.deptype = 'e') s;

  -- Views and functions depend on each other (a function returning a view's
  -- row type, a view calling a function): drop what can be dropped, repeat.
  LOOP
    v_failed := '{}';
    v_progress := false;
    FOREACH v_cmd IN ARRAY v_pending LOOP
      BEGIN
        EXECUTE v_cmd;
        v_progress := true;
      EXCEPTION WHEN dependent_objects_still_exist THEN
        GET STACKED DIAGNOSTICS v_error = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
        v_failed := v_failed || v_cmd;
      END;
    END LOOP;
    EXIT WHEN cardinality(v_failed) = 0;
    IF NOT v_progress THEN
      RAISE EXCEPTION USING ERRCODE = '2BP01',
        MESSAGE = 'nico_extsvc upgrade: objects outside the extension depend on its views or functions',
        DETAIL = format('%s: %s (still to drop: %s)', v_error, v_detail, array_to_string(v_failed, '; ')),
        HINT = 'Drop those objects (and create them again after ALTER EXTENSION nico_extsvc UPDATE).';
    END IF;
    v_pending := v_failed;
  END LOOP;
END
$drop_definitions$;
