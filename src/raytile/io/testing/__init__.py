"""Writers of small files of every format, made from the formats' documented layouts (not from raytile's readers), for tests, examples and benchmarks."""
