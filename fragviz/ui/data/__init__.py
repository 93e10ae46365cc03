"""What the pages show, shaped from the library's records (no Dash, no SQL, no files): cached views of the
stored snapshots, the compare page's timelines on a shared axis, what holds memory, allocation sites as tables
show them, and the what-if page's background runs."""
