"""The workflow's steps, one module (or small package) each: a pure core and `step(config, inputs..., out_dir,
comm)` that the CLI and the rule files call. No step imports another step: what two steps share lives in a
lower tier (formats, data, storage, runtime)."""
