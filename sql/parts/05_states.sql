-- The state vocabularies, each defined once and used by every table that
-- holds one of its states (the transition tables say which moves between
-- them are allowed: lifecycle_transitions, placement_transitions).

CREATE DOMAIN extsvc.lifecycle_state AS text
  CONSTRAINT lifecycle_state_values
  CHECK (VALUE IN ('CREATING', 'READY', 'UPDATING', 'DELETING', 'DELETED', 'FAILED'));
COMMENT ON DOMAIN extsvc.lifecycle_state IS
  'A service''s lifecycle state (SPEC 2.5); the allowed moves are extsvc.lifecycle_transitions.';

CREATE DOMAIN extsvc.placement_state AS text
  CONSTRAINT placement_state_values CHECK (VALUE IN ('ACTIVE', 'REMOVING'));
COMMENT ON DOMAIN extsvc.placement_state IS
  'An attachment row''s placement: ACTIVE (its label is wanted) or REMOVING (until its DPU is observed clean).';

CREATE DOMAIN extsvc.deployment_state AS text
  CONSTRAINT deployment_state_values
  CHECK (VALUE IN ('PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED', 'ERROR', 'UNKNOWN'));
COMMENT ON DOMAIN extsvc.deployment_state IS
  'A service''s observed state on one DPU (SPEC 2.8); the allowed moves are extsvc.placement_transitions.';

-- The deployment states from worst to best (SPEC 2.8), the one order behind an instance's
-- aggregate (extsvc._aggregate_state) and a DPU's state in the metrics (extsvc_dpu_states). The
-- domain above says which states exist, this function their order: regress/pgtap/schema.sql
-- fails when the two do not name the same states (a CHECK calling the function would tie the
-- domain to a function that every upgrade drops and creates again).
CREATE FUNCTION extsvc._deployment_state_precedence() RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  RETURN ARRAY['ERROR', 'UNKNOWN', 'PENDING', 'TERMINATING', 'RUNNING', 'TERMINATED'];
END
$fn$;
COMMENT ON FUNCTION extsvc._deployment_state_precedence() IS
  'Internal: every deployment_state, worst first (SPEC 2.8): ERROR > UNKNOWN > PENDING > TERMINATING > RUNNING > TERMINATED.';

CREATE DOMAIN extsvc.state_actor AS text
  CONSTRAINT state_actor_values CHECK (VALUE IN ('api', 'worker'));
COMMENT ON DOMAIN extsvc.state_actor IS
  'Who made a state change: api (a SQL API call) or worker (a background worker''s completion).';

CREATE DOMAIN extsvc.placement_machine AS text
  CONSTRAINT placement_machine_values CHECK (VALUE IN ('placement', 'deployment', 'site_deployment'));
COMMENT ON DOMAIN extsvc.placement_machine IS
  'The per-DPU state machines: an attachment''s placement, its deployment, and an ALL_DPUS service''s deployment on a DPU.';
