"""One module per CLI verb: each builds on `engine/` (and `bench/`) and returns a `Result`."""
