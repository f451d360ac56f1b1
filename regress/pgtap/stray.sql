-- Stray workloads (issue 23, part 2; sql/parts/16_stray_tables.sql): what a DPU's placement pass
-- reports as pods of our services without an attachment becomes extsvc.stray_workloads, the gauge
-- extsvc_stray_pods and one history entry per new pod; the next pass replaces the DPU's rows.
BEGIN;
\ir helpers.psql
SELECT plan(14);

SET LOCAL extsvc.enforce_chart_allowlist = off;
\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set S '''e2000000-0000-0000-0000-000000000001'''
\set D1 '''fm100dse20000000000000000000000000000d100000000000000000000'''
\set H1 '''fm100hse20000000000000000000000000000f100000000000000000000'''

SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'dev-s1', 'node-s1', true)$$, :D1, :H1), 'fixture: DPU');
SELECT lives_ok(format($$SELECT extsvc.create_service('ts', 'stray-tap', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY', service_id => %L)$$,
                       :'chart', :S), 'fixture: a service');
CREATE TEMP TABLE rel AS SELECT dpf_service_name AS r FROM extsvc.service_records WHERE service_id = :S;

-- a chart that drops our label: the pod is attributed through its release (the DPUService name)
SELECT lives_ok(format($$SELECT extsvc._record_stray_pods(%L, %L::jsonb)$$, :D1,
  json_build_array(json_build_object('service_id', NULL, 'release', (SELECT r FROM rel),
                                     'pod', 'tenant-space/x-abcde', 'reason', 'no_attachment'),
                   json_build_object('service_id', 'not-a-uuid', 'release', NULL,
                                     'pod', 'ns/odd', 'reason', 'no_attachment'),
                   json_build_object('pod', 'ns/bad-reason', 'reason', 'made_up'))::text),
  'a pass reports two stray pods (and one with an unknown reason, which is ignored)');
SELECT is((SELECT array_agg(row(service_id, dpu_node_name, pod, reason)::text ORDER BY pod) FROM extsvc.stray_workloads),
          ARRAY[row(NULL::uuid, 'node-s1', 'ns/odd', 'no_attachment')::text,
                row(trim(both '''' from :S)::uuid, 'node-s1', 'tenant-space/x-abcde', 'no_attachment')::text],
          'the view: service by label or release (NULL when neither names one of ours), node, pod, reason');
SELECT ok((SELECT first_seen IS NOT NULL FROM extsvc.stray_workloads WHERE pod = 'tenant-space/x-abcde'), 'first_seen');
SELECT is((SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_stray_pods' AND labels->>'reason' = 'no_attachment'),
          2::double precision, 'extsvc_stray_pods{reason=no_attachment}');
SELECT is((SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_stray_pods' AND labels->>'reason' = 'node_key_without_dpudevice'),
          0::double precision, 'extsvc_stray_pods{reason=node_key_without_dpudevice} exists at 0');
SELECT is((SELECT array_agg(message) FROM extsvc.service_history WHERE service_id = :S AND reason = 'stray_workload'),
          ARRAY['pod tenant-space/x-abcde runs on DPU node-s1 without an attachment (no_attachment)'],
          'one history entry for the service''s new stray pod');

-- the next pass sees it again, with the other reason: one row, first_seen kept, no new entry
UPDATE extsvc.stray_pods SET first_seen = first_seen - interval '1 hour', last_seen = last_seen - interval '1 hour';
SELECT lives_ok(format($$SELECT extsvc._record_stray_pods(%L, %L::jsonb)$$, :D1,
  json_build_array(json_build_object('service_id', trim(both '''' from :S), 'release', NULL,
                                     'pod', 'tenant-space/x-abcde', 'reason', 'node_key_without_dpudevice'))::text),
  'the next pass');
SELECT is((SELECT array_agg(row(pod, reason, first_seen < last_seen)::text) FROM extsvc.stray_workloads),
          ARRAY[row('tenant-space/x-abcde', 'node_key_without_dpudevice', true)::text],
          'the pod no longer seen is gone; the one seen again keeps first_seen');
SELECT is((SELECT count(*)::integer FROM extsvc.service_history WHERE service_id = :S AND reason = 'stray_workload'),
          1, 'no second history entry for the same pod');

-- a pass that saw none: the DPU's rows go
SELECT lives_ok(format($$SELECT extsvc._record_stray_pods(%L, '[]')$$, :D1), 'a pass without strays');
SELECT is((SELECT count(*)::integer FROM extsvc.stray_workloads), 0, 'no stray pod left');
SELECT is((SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_stray_pods' AND labels->>'reason' = 'no_attachment'),
          0::double precision, 'the gauge is back at 0');

SELECT * FROM finish();
ROLLBACK;
