"""The whole pipeline as one Ray job (issue 9): synth -> mine -> train -> evaluate -> export -> deploy.

`run_pipeline(config, run_dir)` calls each stage's entry point in turn; every stage skips itself when its manifest
is complete for the same config, so a re-submitted job resumes where the last one stopped.
"""

from embedforge.pipeline.runner import PipelineError, run_pipeline

__all__ = ["PipelineError", "run_pipeline"]
