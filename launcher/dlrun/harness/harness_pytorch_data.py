"""dlrun PyTorch harness: the data the training steps consume.  Standard
library + torch; runs on Python >= 3.6 with PyTorch >= 1.0.

Synthetic, as tf_cnn_benchmarks' synthetic data: one fixed random batch per
rank (images for the CNNs, token ids for BERT), generated once and kept on
the device, so that nothing is generated on the critical path.
"""

import torch


class FixedBatches(object):
    """The one synthetic batch, on ``device``, given at every step."""

    def __init__(self, inputs, targets, device, channels_last):
        self.inputs = [x.to(device) for x in inputs]
        self.targets = [y.to(device) for y in targets]
        if channels_last:
            self.inputs = [x.contiguous(memory_format=torch.channels_last)
                           for x in self.inputs]

    def label(self):
        return "synthetic"

    def fields(self):
        return {"data_source": "synthetic"}

    def next(self):
        return self.inputs, self.targets

    def close(self):
        self.inputs = self.targets = None


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


def synthetic_tokens(batch_size, seq_length, per_instance, vocab_size,
                     task, seed):
    """(inputs, targets) on the CPU for a BERT task, drawn from a generator
    seeded with ``seed``.  inputs: random token ids, token types (the first
    half of each sequence segment 0, as the question or context, the rest
    segment 1) and an all-ones attention mask (full windows), each
    (batch_size, seq_length), or (batch_size, per_instance, seq_length) for
    multiple choice.  targets: SWAG (the right ending's index) or SQuAD (the
    answer's start and end token, start <= end)."""
    gen = torch.Generator()
    gen.manual_seed(seed)
    shape = ((batch_size, seq_length) if per_instance == 1
             else (batch_size, per_instance, seq_length))
    input_ids = torch.randint(0, vocab_size, shape, generator=gen,
                              dtype=torch.long)
    token_type_ids = torch.zeros(shape, dtype=torch.long)
    token_type_ids[..., seq_length // 2:] = 1
    attention_mask = torch.ones(shape, dtype=torch.long)
    inputs = (input_ids, token_type_ids, attention_mask)
    if task == "swag":
        return inputs, (torch.randint(0, per_instance, (batch_size,),
                                      generator=gen, dtype=torch.long),)
    bounds = torch.randint(0, seq_length, (2, batch_size), generator=gen,
                           dtype=torch.long)
    start, _ = bounds.min(0)
    end, _ = bounds.max(0)
    return inputs, (start, end)
