"""tf_cnn_benchmarks' knobs: `knobs` (plan data: its knobs checked against the image, and the part of the
comparability key they decide) sits with the plan. Its command line and process layout are `dlrun.tfcnn_command`,
beside this package on the renderer's layer, which alone imports it: inside the package it would make the package
and the plan depend on each other."""
