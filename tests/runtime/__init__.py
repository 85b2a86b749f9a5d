"""The runtime's rules, through the public verbs: steps, retries, waits and events, the
instance's lifecycle, composition, flow control, schedules, timeouts, ticks and sweeps
(django_workerflow/runtime)."""
