"""The timeline store: an embedded SQLite file by default. `schema` defines it, `writer` is its one writer,
`reader` answers the queries of the CLI, the dashboard and the HTTP API."""
