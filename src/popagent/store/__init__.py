"""Storage layer: the PostgreSQL server, the pool, the migrations and the SQL.

Nothing in this package opens a transaction on a caller's behalf except the
migration runner, which owns its own connection.
"""
