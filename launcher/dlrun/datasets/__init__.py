"""Datasets dlrun writes itself: small ImageNet-shaped training sets (`dlrun data synth`) in the two layouts
the workloads read, a JPEG ImageFolder tree and TFRecord shards of tf.train.Example records.

Layer: beside `dlrun.measure` (it imports nothing above the catalogs). Pillow is imported late, by the
JPEG encoder, so that importing this package costs nothing."""
from dlrun.datasets.synth import FORMATS, SynthSpec, synthesize

__all__ = ["FORMATS", "SynthSpec", "synthesize"]
