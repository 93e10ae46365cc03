"""The dashboard's HTTP side: the JSON API and exports, the door every request passes (guard), uploads and their spool, the pace a client must keep, and the child process that ingests an upload."""
