"""The runtime: configuration, the training loop's pieces, mappings and the paths that run them.

`drlhet.runtime.run.run(cfg, mapping)` is the one entry point (docs/design.md section 6).
"""
