"""Developer tools that are not part of the harness a user runs, nor tests: the GPU check (`make gpu-check`), the zoo
against public implementations on a GPU (`python -m tools.gpu_comparisons`), S3Attention before and after its tuning
(`python -m tools.s3_before_after`). Run from the repository root."""
