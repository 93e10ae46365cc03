#!/usr/bin/env bash
# A local PostgreSQL server for fragviz's tests and for trying the server store: Debian's postgresql package,
# its cluster started, and a role `fragviz` (password `fragviz`, may create databases, in pg_signal_backend)
# with a database `fragviz`. Safe to run again. Prints the URL: postgresql://fragviz:fragviz@127.0.0.1:5432/fragviz
set -euo pipefail
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if ! command -v pg_lsclusters > /dev/null; then
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql > /dev/null
fi
cluster=$(pg_lsclusters --no-header | awk 'NR == 1 {print $1, $2}')
if [ -z "$cluster" ]; then
    version=$(ls /usr/lib/postgresql | sort -n | tail -1)
    as_root pg_createcluster "$version" main > /dev/null
    cluster="$version main"
fi
if ! pg_lsclusters --no-header | awk -v c="$cluster" '$1 " " $2 == c' | grep -q online; then
    as_root pg_ctlcluster $cluster start
fi
psql_admin() { as_root su postgres -c "psql -v ON_ERROR_STOP=1 -qtA -c \"$1\""; }
for _ in $(seq 30); do psql_admin "SELECT 1" > /dev/null 2>&1 && break; sleep 1; done
if [ "$(psql_admin "SELECT count(*) FROM pg_roles WHERE rolname = 'fragviz'")" = 0 ]; then
    psql_admin "CREATE ROLE fragviz LOGIN CREATEDB PASSWORD 'fragviz'"
fi
# DROP DATABASE ... WITH (FORCE) ends every session on the database, an autovacuum worker's too, which only a
# member of pg_signal_backend may end
if [ "$(psql_admin "SELECT pg_has_role('fragviz', 'pg_signal_backend', 'MEMBER')")" != t ]; then
    psql_admin "GRANT pg_signal_backend TO fragviz"
fi
if [ "$(psql_admin "SELECT count(*) FROM pg_database WHERE datname = 'fragviz'")" = 0 ]; then
    psql_admin "CREATE DATABASE fragviz OWNER fragviz"
fi
echo "postgresql://fragviz:fragviz@127.0.0.1:5432/fragviz"
