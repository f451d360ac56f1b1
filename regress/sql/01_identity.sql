-- SPEC 2.2: generated identity. The expected names were computed
-- independently of the implementation (openssl + python, cross-checked with
-- coreutils); see test/unit/identity_vectors.txt.
CREATE EXTENSION nico_extsvc;

CREATE TEMP TABLE vectors (service_id uuid, version text, expected text);
INSERT INTO vectors VALUES
  ('7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d', 'V1-T1700000000000000', 'extsvc-qquz5u6fxoepw7najclp'),
  ('00000000-0000-0000-0000-000000000000', 'V1-T1',                'extsvc-3pzba6qc54lyz34bpgc2'),
  ('f47ac10b-58cc-4372-a567-0e02b2c3d479', 'V1-T1733011200123456', 'extsvc-3zd33fdibjgwb7z22nad'),
  ('3fa85f64-5717-4562-b3fc-2c963f66afa6', 'V2-T1700000000000001', 'extsvc-dze3mztjibm756vdhxes');

-- the name, the placement label key and their lengths
SELECT service_id, version,
       extsvc.dpf_service_name(service_id, version) AS dpf_service_name,
       extsvc.dpf_service_name(service_id, version) = expected AS name_ok,
       length(extsvc.dpf_service_name(service_id, version)) AS name_len,
       extsvc.placement_label_key(service_id, version) AS label_key,
       extsvc.placement_label_key(service_id, version) = 'nico/' || expected AS key_ok
  FROM vectors ORDER BY service_id;

-- the UUID is hashed in its canonical lowercase hyphenated form, however it
-- was written
SELECT extsvc.dpf_service_name('7B4D3C2A-1E5F-4A6B-9C8D-0E1F2A3B4C5D', 'V1-T1700000000000000') AS upper_case,
       extsvc.dpf_service_name('{7b4d3c2a1e5f4a6b9c8d0e1f2a3b4c5d}', 'V1-T1700000000000000') AS braces_no_hyphens,
       extsvc.placement_label_key('F47AC10B-58CC-4372-A567-0E02B2C3D479', 'V1-T1733011200123456') AS upper_case_key;

-- the version is part of the hash: another version gives another name
SELECT extsvc.dpf_service_name('7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d', 'V1-T1700000000000000')
    <> extsvc.dpf_service_name('7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d', 'V1-T1700000000000001') AS version_matters;

-- the shape of every generated name: extsvc- and 20 base32 characters
SELECT count(*) AS names, bool_and(n ~ '^extsvc-[a-z2-7]{20}$') AS all_match
  FROM (SELECT extsvc.dpf_service_name(gen_random_uuid(), 'V1-T' || g) AS n
          FROM generate_series(1, 200) g) x;

-- the functions are immutable and strict
SELECT extsvc.dpf_service_name(NULL, 'V1-T1') IS NULL AS null_id,
       extsvc.placement_label_key('00000000-0000-0000-0000-000000000000', NULL) IS NULL AS null_version;
SELECT p.proname, p.provolatile, p.proisstrict
  FROM pg_proc p WHERE p.pronamespace = 'extsvc'::regnamespace
   AND p.proname IN ('dpf_service_name', 'placement_label_key') ORDER BY 1;

-- an empty version is refused
\set VERBOSITY terse
SELECT extsvc.dpf_service_name('00000000-0000-0000-0000-000000000000', '');
\set VERBOSITY default

DROP EXTENSION nico_extsvc;
