LISTEN "workerflow_finished_1"
