"""The store: named statements and their cost, the SQL texts, the step store, leases,
transactions, the bell channel, locks and races on PostgreSQL, database faults
(django_workerflow/store)."""
