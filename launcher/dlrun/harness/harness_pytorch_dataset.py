"""dlrun PyTorch harness: real training data - ImageNet as a JPEG
ImageFolder tree or as TFRecord shards - decoded in DataLoader worker
processes.  Standard library + torch + Pillow (imported only when a data
directory is given); runs on Python >= 3.6 with PyTorch >= 1.0.

Layouts, looked for in this order under the data directory:

* TFRecord: shards named ``train-NNNNN-of-NNNNN`` (ImageNet's build
  scripts, as tf_cnn_benchmarks reads them) holding tf.train.Example records
  with ``image/encoded`` (JPEG) and ``image/class/label`` (1-based, 0 being
  the background class; label L trains class (L - 1) mod 1000).
* ImageFolder: ``train/<class>/<image>`` or ``<class>/<image>`` (image
  suffixes .jpeg .jpg .png .bmp .ppm .webp, any case); classes are the
  sorted folder names, class i trains class i mod 1000.

Anything else - no such files, an image that is not a regular file (a FIFO
would block a reader forever), images Pillow cannot decode, a record whose
checksum is wrong - is an error (exit 2) naming the path and what was
expected; the harness never falls back to synthetic data.  A few images
(the first, the last and some between) are decoded before training starts,
so that a directory of non-images fails at once.

Training preprocessing, approximating tf_cnn_benchmarks' (preprocessing.py,
train_image without colour distortions): a random crop like
tf.image.sample_distorted_bounding_box with the whole image as the box
(min_object_covered 0.1, so 10% to 100% of the area, aspect ratio 3/4 to
4/3, 10 attempts, else the whole image), a bilinear resize to the model's
input size and a random horizontal flip.  JPEGs are decoded with Pillow's
draft mode (libjpeg's DCT scaling) at the smallest scale that still covers
the input size, which is what makes decoding cheap for images much larger
than the input.  Workers return uint8 HWC tensors (a quarter of float32's
bytes through the worker queues and, on a GPU, pinned memory); the training
process converts a batch to float and normalises it with ImageNet's channel
means and standard deviations, on the device.

Sampling: each epoch is a permutation (seeded with --seed) of which rank r
takes every world_size-th image from position r; epochs follow each other
without restarting the workers.  ``images_decoded`` counts the images that
reached training.
"""

import io
import os
import random

import torch

from harness_common import NUM_CLASSES, HarnessError
from harness_contract import TRAIN_SPLIT, is_image_file, tfrecord_split
from harness_pytorch_tfrecord import (TFRecordError, index_records,
                                      parse_example, read_record)

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
PROBES = 4
EXPECTED = ("TFRecord shards train-NNNNN-of-NNNNN or image folders "
            "train/<class>/*.JPEG or <class>/*.JPEG")

_RNG = random.Random(0)


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise HarnessError("--data-dir needs Pillow (PIL) to decode images, "
                           "and this Python has none; install pillow in "
                           "the image")
    return Image


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        raise HarnessError("--data-dir %s: cannot read (%s); expected %s"
                           % (path, exc.strerror or exc, EXPECTED))


def _regular(path):
    if not os.path.isfile(path):
        raise HarnessError("%s is not a regular file; expected %s"
                           % (path, EXPECTED))
    return path


def _image_folder(root):
    """[(path, class index)], class names, or None if ``root`` has no class
    folders with images."""
    classes = [name for name in _listdir(root)
               if not name.startswith(".")
               and os.path.isdir(os.path.join(root, name))]
    samples = []
    for index, name in enumerate(classes):
        folder = os.path.join(root, name)
        for entry in _listdir(folder):
            if is_image_file(entry):
                samples.append((_regular(os.path.join(folder, entry)),
                                index))
    return (samples, classes) if samples else None


class ImageFolderData(object):
    format = "jpeg"

    def __init__(self, root, samples, classes):
        self.root = root
        self.samples = samples
        self.num_classes = len(classes)

    def __len__(self):
        return len(self.samples)

    def load(self, index):
        path, label = self.samples[index]
        with open(path, "rb") as handle:
            return handle.read(), label % NUM_CLASSES, path


class TFRecordData(object):
    format = "tfrecord"

    def __init__(self, root, shards):
        self.root = root
        self.shards = shards
        self.records = []
        for shard, path in enumerate(shards):
            try:
                records = index_records(path)
            except (TFRecordError, OSError) as exc:
                raise HarnessError("%s; expected %s" % (exc, EXPECTED))
            self.records.extend((shard, offset, length)
                                for offset, length in records)
        self._handles = {}
        self._pid = None

    def __len__(self):
        return len(self.records)

    def load(self, index):
        if self._pid != os.getpid():  # a forked worker opens its own files
            self._handles, self._pid = {}, os.getpid()
        shard, offset, length = self.records[index]
        path = self.shards[shard]
        handle = self._handles.get(shard)
        if handle is None:
            handle = self._handles[shard] = open(path, "rb")
        where = "%s: record at byte %d" % (path, offset - 12)
        try:
            features = parse_example(read_record(handle, path, offset,
                                                 length))
        except TFRecordError as exc:
            raise HarnessError(str(exc))
        except ValueError as exc:
            raise HarnessError("%s: not a tf.train.Example (%s)"
                               % (where, exc))
        encoded = features.get("image/encoded")
        label = features.get("image/class/label")
        if not encoded or not label:
            raise HarnessError("%s: no image/encoded or image/class/label "
                               "feature; expected ImageNet TFRecords"
                               % where)
        return encoded[0], (int(label[0]) - 1) % NUM_CLASSES, where


def open_dataset(root):
    """The dataset under ``root`` (see the module notes), or HarnessError."""
    if not os.path.isdir(root):
        raise HarnessError("--data-dir %s is not a directory; expected %s"
                           % (root, EXPECTED))
    names = _listdir(root)
    shards = [os.path.join(root, n) for n in names if tfrecord_split(n) == TRAIN_SPLIT]
    if shards:
        data = TFRecordData(root, [_regular(p) for p in shards])
    else:
        train = os.path.join(root, "train")
        found = _image_folder(train) if os.path.isdir(train) else None
        found = found or _image_folder(root)
        if found is None:
            raise HarnessError("--data-dir %s holds no dataset; expected %s"
                               % (root, EXPECTED))
        data = ImageFolderData(root, found[0], found[1])
    if not len(data):
        raise HarnessError("--data-dir %s: the TFRecord shards hold no "
                           "records; expected %s" % (root, EXPECTED))
    return data


def distorted_box(rng, width, height):
    """(left, top, right, bottom) of a random crop (see the module notes)."""
    area = width * height
    for _ in range(10):
        target = rng.uniform(0.1, 1.0) * area
        aspect = rng.uniform(0.75, 1.33)
        w = int(round((target * aspect) ** 0.5))
        h = int(round((target / aspect) ** 0.5))
        if 0 < w <= width and 0 < h <= height:
            left = rng.randint(0, width - w)
            top = rng.randint(0, height - h)
            return left, top, left + w, top + h
    return 0, 0, width, height


def decode(blob, size, rng, where):
    """A uint8 (size, size, 3) tensor: ``blob`` decoded, randomly cropped,
    resized and flipped for training."""
    Image = _pil()
    try:
        image = Image.open(io.BytesIO(blob))
        image.draft("RGB", (size, size))
        image = image.convert("RGB")
    except Exception as exc:
        raise HarnessError("%s: cannot decode as an image (%s: %s); expected "
                           "%s" % (where, type(exc).__name__, exc, EXPECTED))
    bilinear = getattr(Image, "Resampling", Image).BILINEAR
    image = image.crop(distorted_box(rng, *image.size)).resize(
        (size, size), bilinear)
    if rng.random() < 0.5:
        image = image.transpose(getattr(Image, "Transpose",
                                        Image).FLIP_LEFT_RIGHT)
    raw = image.tobytes()
    if hasattr(torch, "frombuffer"):
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    else:  # PyTorch < 1.10
        flat = torch.ByteTensor(torch.ByteStorage.from_buffer(raw))
    return flat.view(size, size, 3)


class _Samples(torch.utils.data.Dataset):
    def __init__(self, data, size):
        self.data = data
        self.size = size

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        blob, label, where = self.data.load(index)
        return decode(blob, self.size, _RNG, where), label


class _EndlessSampler(torch.utils.data.Sampler):
    """Seeded permutations, one per epoch, this rank's share of each."""

    def __init__(self, count, rank, world_size, seed):
        self.count, self.rank, self.world = count, rank, world_size
        self.seed = seed

    def __iter__(self):
        gen = torch.Generator()
        gen.manual_seed(self.seed)
        while True:
            order = torch.randperm(self.count, generator=gen).tolist()
            for index in order[self.rank::self.world]:
                yield index

    def __len__(self):
        return 1 << 62


def _worker_init(worker_id):
    torch.set_num_threads(1)
    _RNG.seed(torch.initial_seed() % (1 << 32))


def check_decodes(data, size):
    """Decode a few images now, so that a non-dataset fails before training."""
    count = len(data)
    picks = sorted(set([0, count - 1] + [count * i // PROBES
                                         for i in range(1, PROBES)]))
    rng = random.Random(0)
    for index in picks:
        blob, _, where = data.load(index)
        decode(blob, size, rng, where)


class RealBatches(object):
    """Batches of the data under ``root`` on ``device``: next() gives
    ((images,), (labels,))."""

    loads = True  # a loader the loader-only rate measures

    def __init__(self, root, batch_size, image_size, workers, rank,
                 world_size, seed, device, channels_last):
        self.data = open_dataset(root)
        size = image_size[1]
        check_decodes(self.data, size)
        if len(self.data) < world_size * batch_size:
            raise HarnessError("--data-dir %s: %d images, fewer than one "
                               "global batch (%d); expected a larger "
                               "dataset" % (root, len(self.data),
                                            world_size * batch_size))
        _RNG.seed(seed + rank)
        self.device = device
        self.channels_last = channels_last
        self.images_decoded = 0
        self.workers = workers
        self.prefetched = 2 * workers  # DataLoader's prefetch factor 2
        loader = torch.utils.data.DataLoader(
            _Samples(self.data, size), batch_size=batch_size,
            sampler=_EndlessSampler(len(self.data), rank, world_size, seed),
            num_workers=workers, pin_memory=device.type == "cuda",
            drop_last=True, worker_init_fn=_worker_init)
        self._iter = iter(loader)
        shape = (1, 3, 1, 1)
        self._mean = torch.tensor([255.0 * m for m in MEAN],
                                  device=device).view(shape)
        self._std = torch.tensor([255.0 * s for s in STD],
                                 device=device).view(shape)

    def label(self):
        return "%s: %s, %d images" % (self.data.format, self.data.root,
                                      len(self.data))

    def fields(self):
        return {"data_source": self.data.format, "data_path": self.data.root,
                "data_images": len(self.data),
                "images_decoded": self.images_decoded}

    def next(self):
        try:
            images, labels = next(self._iter)
        except HarnessError as exc:  # raised in a worker: keep its own line
            raise HarnessError(exc.message.strip().splitlines()[-1]
                               .split("HarnessError: ", 1)[-1])
        self.images_decoded += int(labels.shape[0])
        images = images.to(self.device, non_blocking=True)
        # NHWC bytes seen as NCHW: a channels-last tensor where it exists.
        images = images.permute(0, 3, 1, 2).float()
        images = images.sub_(self._mean).div_(self._std)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        else:
            images = images.contiguous()
        labels = labels.to(self.device, non_blocking=True)
        return (images,), (labels,)

    def close(self):
        self._iter = None  # shuts the workers down
