"""The GPU check (`python3 -m benchmarks.gpu.check`): see benchmarks/gpu/README.md."""
