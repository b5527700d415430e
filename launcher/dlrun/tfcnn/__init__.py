"""tf_cnn_benchmarks support in one place, on two layers: `knobs` (plan data: its knobs checked against the
image, and the part of the comparability key they decide) sits with the plan; `command` (its command line and
process layout) with the renderer, which alone imports it."""
