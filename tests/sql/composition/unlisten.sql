UNLISTEN "workerflow_finished_1"
