"""Example project used for the test suite, the demo and the benchmarks."""
