SELECT nextval(s.seq) FROM (SELECT pg_get_serial_sequence(%s, 'id')::regclass AS seq OFFSET 0) AS s, generate_series(1, %s)
