"""dlrun PyTorch harness: the data the training steps consume.  Standard
library + torch; runs on Python >= 3.6 with PyTorch >= 1.0.

Synthetic, as tf_cnn_benchmarks' synthetic data: one fixed random batch per
rank, generated once and kept on the device, so that nothing is generated on
the critical path.
"""

import torch


def synthetic_images(batch_size, image_size, num_classes, seed):
    """(images, labels) on the CPU: ``batch_size`` standard-normal images of
    ``image_size`` (C, H, W) and integer labels in [0, num_classes), drawn
    from a generator seeded with ``seed``."""
    gen = torch.Generator()
    gen.manual_seed(seed)
    c, h, w = image_size
    images = torch.randn(batch_size, c, h, w, generator=gen)
    labels = torch.randint(0, num_classes, (batch_size,), generator=gen,
                           dtype=torch.long)
    return images, labels
