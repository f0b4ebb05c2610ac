"""The overlay engine: what an env is, which patch set fits it, and the transactional writes.

Pure Python over the files of one env; it runs SGLang only through `in_target/` scripts in the
env's own interpreter. Imported by `commands/`, `matrix/` and `bench/`; imports none of them.
"""
