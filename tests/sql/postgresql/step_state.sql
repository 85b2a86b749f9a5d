SELECT state FROM workerflow_step WHERE id = %(step)s
