-- SPEC 2.3: strict validation of DPF_HELM_CHART data.
-- extsvc.validate_dpf_helm_chart_data(text) returns the normalized form or
-- raises with a SQLSTATE, a one-line message, DETAIL naming the JSON path
-- and a HINT. v() below shows all four without unstable LOCATION lines.
CREATE EXTENSION nico_extsvc;

CREATE FUNCTION pg_temp.v(data text, OUT state text, OUT message text, OUT detail text, OUT hint text)
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM extsvc.validate_dpf_helm_chart_data(data);
  state := '00000'; message := 'ok';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                          detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
END $$;
-- the same, but only SQLSTATE, message and DETAIL (one line per case)
CREATE FUNCTION pg_temp.e(data text) RETURNS text
LANGUAGE sql AS $$ SELECT state || ' | ' || message || ' | ' || coalesce(detail, '') FROM pg_temp.v(data) $$;

-- required fields shared by the cases below
\set req '"chartName":"c","chartVersion":"1.0.0","security":{"privileged":false}'

------------------------------------------------------------------ accepted
-- minimal
SELECT extsvc.validate_dpf_helm_chart_data(
  '{"repoURL":"oci://registry.example.com/charts","chartName":"tenant-service",
    "chartVersion":"1.2.3","security":{"privileged":false}}');

-- full: serviceDaemonSet with every field, spiffe, values (passed through,
-- including a values.serviceDaemonSet object without nodeSelector)
SELECT jsonb_pretty(extsvc.validate_dpf_helm_chart_data($j${
  "repoURL": "https://charts.example.com:8443/a/b",
  "chartName": "my.chart_name-1",
  "chartVersion": "v1.2.3-rc.1+b.5",
  "security": {"privileged": true, "spiffe": {}},
  "serviceDaemonSet": {
    "labels": {"app": "svc", "example.com/tier": ""},
    "annotations": {"example.com/note": "hello world"},
    "resources": {"cpu": "100m", "memory": "1Gi", "nvidia.com/gpu": 1},
    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}}
  },
  "values": {"z": 1, "a": {"b": [1, 2]}, "serviceDaemonSet": {"labels": {"x": "y"}}}
}$j$));

-- values: absent and null both mean "no values" (normalized to absent);
-- {} is kept: absent is not {}
SELECT d ? 'values' AS has_values, d->'values' AS "values"
  FROM (VALUES (extsvc.validate_dpf_helm_chart_data('{"repoURL":"oci://r.example.com/x",' || :'req' || '}')),
               (extsvc.validate_dpf_helm_chart_data('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"values":null}')),
               (extsvc.validate_dpf_helm_chart_data('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"values":{}}')))
       t(d);

-- more accepted shapes
SELECT n AS "case", pg_temp.e(x) AS accepted FROM unnest(ARRAY[
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"updateStrategy":{"type":"OnDelete"}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":1,"maxUnavailable":0}}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"resources":{"cpu":2147483647,"memory":"0.5"}}}'),
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"v2.0.0","security":{"privileged":true}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"values":{"nodeSelector":{"a":"b"}}}'),
  ('  {"repoURL":"oci://r.example.com/x",' || :'req' || '}  ')
]) WITH ORDINALITY t(x, n) ORDER BY n;

-- NULL in, NULL out (the function is strict)
SELECT extsvc.validate_dpf_helm_chart_data(NULL) IS NULL AS null_is_null;

------------------------------------------------------------------ not JSON: 22P02
SELECT * FROM pg_temp.v('{"repoURL":"oci://a/b","repoURL":"oci://c/d"}');
SELECT * FROM pg_temp.v('{"repoURL":"oci://r.example.com/x",' || :'req' || '} {}');
SELECT n AS "case", pg_temp.e(x) AS refused FROM unnest(ARRAY[
  ('not json'),
  (''::text),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || '} x'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"values":{"a":{"b":1,"b":1}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"labels":{"app/x":"1","app/x":"2"}}}')
]) WITH ORDINALITY t(x, n) ORDER BY n;

------------------------------------------------------------------ invalid: 22023
-- not an object
SELECT * FROM pg_temp.v('[1]');
-- unknown field (the legacy credential input is just an unknown field here)
SELECT * FROM pg_temp.v('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"foo":1}');
-- reserved nodeSelector, typed and inside values
SELECT * FROM pg_temp.v('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"nodeSelector":{}}}');
SELECT * FROM pg_temp.v('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"values":{"serviceDaemonSet":{"nodeSelector":{"a":"b"}}}}');
-- values.serviceDaemonSet must be an object
SELECT * FROM pg_temp.v('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"values":{"serviceDaemonSet":"x"}}');
-- credentials in the URL: 0A000, and the secret is not echoed
SELECT * FROM pg_temp.v('{"repoURL":"https://user:s3cret@charts.example.com/a",' || :'req' || '}');
-- chart version
SELECT * FROM pg_temp.v('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"latest","security":{"privileged":false}}');
-- a label
SELECT * FROM pg_temp.v('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"labels":{"bad key":"x"}}}');

-- one line per refused case
SELECT n AS "case", pg_temp.e(x) AS refused FROM unnest(ARRAY[
  -- root and required fields
  ('"just a string"'),
  ('null'),
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"1.0.0"}'),
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"1.0.0","security":{}}'),
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"1.0.0","security":{"privileged":"yes"}}'),
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"1.0.0","security":{"privileged":false,"spiffe":{"a":1}}}'),
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"1.0.0","security":{"privileged":false,"runAsRoot":true}}'),
  -- repoURL
  ('{"repoURL":"http://r.example.com/x",' || :'req' || '}'),
  ('{"repoURL":"https://r.example.com/x?token=abc",' || :'req' || '}'),
  ('{"repoURL":"https://r.example.com/x#frag",' || :'req' || '}'),
  ('{"repoURL":"oci://token@r.example.com/x",' || :'req' || '}'),
  ('{"repoURL":"oci:///x",' || :'req' || '}'),
  -- chartName
  ('{"repoURL":"oci://r.example.com/x","chartName":"Bad_Chart","chartVersion":"1.0.0","security":{"privileged":false}}'),
  -- chartVersion: ranges, wildcards, tags, incomplete
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"^1.0.0","security":{"privileged":false}}'),
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"~1.2.3","security":{"privileged":false}}'),
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":">=1.0.0","security":{"privileged":false}}'),
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"1.x","security":{"privileged":false}}'),
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"*","security":{"privileged":false}}'),
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"1.2","security":{"privileged":false}}'),
  ('{"repoURL":"oci://r.example.com/x","chartName":"c","chartVersion":"01.2.3","security":{"privileged":false}}'),
  -- serviceDaemonSet
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"tolerations":[]}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"nodeSelector":null}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"labels":{"nico/extsvc-abc":"enabled"}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"labels":{"svc.dpu.nvidia.com/service":"x"}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"annotations":{"nico/owner":"x"}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"resources":{"cpu":"1.5.5"}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"resources":{"cpu":-1}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"resources":{"cpu":2147483648}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"updateStrategy":{"type":"Recreate"}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"updateStrategy":{"type":"OnDelete","rollingUpdate":{"maxUnavailable":1}}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":0,"maxUnavailable":"0%"}}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"101%"}}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"serviceDaemonSet":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":1}}}}'),
  -- values
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"values":[1]}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"values":{"serviceDaemonSet":{"nodeSelector":{"nodeSelectorTerms":[]}}}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"values":{"serviceDaemonSet":null}}'),
  ('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"values":{"serviceDaemonSet":[]}}')
]) WITH ORDINALITY t(x, n) ORDER BY n;

-- size limit: 131072 bytes
SELECT pg_temp.e('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"values":{"pad":"' || repeat('x', 131072) || '"}}') AS too_large;

------------------------------------------------------------------ exact numbers, NUL, long tokens
-- numbers in values are kept exactly: the validated form and the rendered
-- DPUService carry the same values (no rounding through double)
SELECT d -> 'values' AS exact_values,
       extsvc._render_dpuservice('6f1c2b1e-0000-4000-8000-000000000001', 'V1-T1700000000000000', 1, d, 'ns')
         #> '{spec,helmChart,values}' = d -> 'values' AS rendered_same
  FROM extsvc.validate_dpf_helm_chart_data('{"repoURL":"oci://r.example.com/x",' || :'req' ||
         ',"values":{"u64":18446744073709551615,"i64":-9223372036854775808,"frac":0.1,"small":2.5e-7,"f":1.0,"e":1e2}}') d;
-- numbers that would change are refused with the path; huge ones are not echoed
SELECT n, pg_temp.e('{"repoURL":"oci://r.example.com/x",' || :'req' || ',"values":' || x || '}')
  FROM unnest(ARRAY[
  '{"n":123456789012345678901234567890}',
  '{"t":[1,1e-400]}',
  '{"h":{"x":1e400}}',
  '{"p":0.30000000000000000001}',
  '{"long":' || repeat('9', 120000) || '}',
  -- U+0000 cannot be stored in jsonb: refused by the validator, not by jsonb
  '{"s":"a\u0000b"}',
  '{"k\u0000":"v"}',
  -- a 100000-byte key is quoted only by its first 64 bytes
  '{"' || repeat('k', 100000) || '":{"a":1,"a":2}}'
]) WITH ORDINALITY t(x, n) ORDER BY n;
SELECT pg_temp.e('{"' || repeat('k', 100000) || '":1}') AS long_unknown_key;

------------------------------------------------------------------ Retry-After bound
-- honoured up to extsvc.retry_cap (300 s): neither a retry decades away nor
-- an interval overflow that would lose the outcome
SELECT extsvc._backoff(1, 42) AS honoured, extsvc._backoff(1, 1e9) AS e9,
       extsvc._backoff(1, 1e13) AS e13, extsvc._backoff(1, 'Infinity') AS inf;

DROP EXTENSION nico_extsvc;
