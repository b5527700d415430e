"""dlrun TensorFlow 2 harness: the data the steps consume - a fixed synthetic
batch, or a tf.data pipeline over an image-folder tree of JPEGs or ImageNet
TFRecord shards.  Standard library + TensorFlow; runs on Python >= 3.6.
What is read and how is described in ``harness_tensorflow.py``'s notes.
"""

import os

import tensorflow as tf

from harness_common import HarnessError
from harness_contract import TRAIN_SPLIT, tfrecord_split

#: The images of a folder tree this pipeline decodes (tf.io.decode_jpeg).
JPEG_EXTENSIONS = (".jpg", ".jpeg", ".JPG", ".JPEG")
#: How the messages name ImageNet's training shards (harness_contract.TFRECORD_SHARD recognises them).
TFRECORD_PATTERN = "train-NNNNN-of-NNNNN"


def synthetic_batch(batch, size, num_classes, seed):
    """(images, labels): one random batch, made once and kept on the device,
    as tf_cnn_benchmarks' synthetic data."""
    images = tf.random.stateless_uniform((batch, size, size, 3), (seed, 0))
    labels = tf.random.stateless_uniform((batch,), (seed, 1),
                                         maxval=num_classes, dtype=tf.int32)
    return images, labels


def _root(data_dir):
    train = os.path.join(data_dir, "train")
    return train if os.path.isdir(train) else data_dir


def detect_format(data_dir, fmt):
    """"tfrecord" or "folder" for a data directory (``fmt`` auto looks for
    TFRecord shards first)."""
    if not os.path.isdir(data_dir):
        raise HarnessError("--data-dir %r is not a directory; valid: an "
                           "image-folder tree or a directory of %s TFRecord "
                           "shards" % (data_dir, TFRECORD_PATTERN))
    if fmt != "auto":
        return fmt
    if _shards(data_dir):
        return "tfrecord"
    return "folder"


def _shards(data_dir):
    found = []
    for where in (data_dir, os.path.join(data_dir, "train")):
        names = os.listdir(where) if os.path.isdir(where) else []
        found.extend(os.path.join(where, name) for name in names
                     if tfrecord_split(name) == TRAIN_SPLIT)
    return sorted(set(found))


def _folder_files(data_dir):
    root = _root(data_dir)
    classes = sorted(d for d in os.listdir(root)
                     if os.path.isdir(os.path.join(root, d)))
    files, labels = [], []
    for index, name in enumerate(classes):
        for dirpath, _, names in os.walk(os.path.join(root, name)):
            for fname in sorted(names):
                if fname.endswith(JPEG_EXTENSIONS):
                    files.append(os.path.join(dirpath, fname))
                    labels.append(index)
    if not files:
        raise HarnessError("--data-dir %r holds no JPEG files in class "
                           "folders (%s/<class>/*.jpg); valid: an image-folder "
                           "tree or %s TFRecord shards"
                           % (data_dir, root, TFRECORD_PATTERN))
    return files, labels, len(classes)


def _preprocess(size, seed):
    """Decoded image -> float32 [size, size, 3] in [0, 1]: the shorter side
    resized to ``size``, a random size x size crop, a random flip."""
    def apply(image):
        image = tf.image.convert_image_dtype(image, tf.float32)
        shape = tf.cast(tf.shape(image)[:2], tf.float32)
        scale = float(size) / tf.reduce_min(shape)
        target = tf.cast(tf.math.ceil(shape * scale), tf.int32)
        image = tf.image.resize(image, tf.maximum(target, size))
        image = tf.image.random_crop(image, [size, size, 3], seed=seed)
        return tf.image.random_flip_left_right(image, seed=seed)
    return apply


def real_dataset(data_dir, fmt, batch, size, num_classes, rank, world_size,
                 workers, seed):
    """(dataset, description): an endless tf.data pipeline of
    (images, labels) batches, this rank's shard of the files."""
    fmt = detect_format(data_dir, fmt)
    parallel = workers if workers else tf.data.AUTOTUNE
    prep = _preprocess(size, seed)
    if fmt == "tfrecord":
        shards = _shards(data_dir)
        if not shards:
            raise HarnessError("--data-dir %r holds no %s TFRecord shards; "
                               "valid: a directory of ImageNet TFRecords"
                               % (data_dir, TFRECORD_PATTERN))
        files = tf.data.Dataset.from_tensor_slices(shards)
        if len(shards) >= world_size:
            files = files.shard(world_size, rank)
        ds = files.interleave(tf.data.TFRecordDataset,
                              cycle_length=max(1, min(len(shards), 4)),
                              num_parallel_calls=parallel)
        if len(shards) < world_size:
            ds = ds.shard(world_size, rank)
        ds = ds.shuffle(1024, seed=seed, reshuffle_each_iteration=True)
        features = {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        }

        def parse(record):
            parsed = tf.io.parse_single_example(record, features)
            image = tf.io.decode_jpeg(parsed["image/encoded"], channels=3)
            # ImageNet TFRecords number the classes 1..1000 (0 is background).
            label = tf.math.floormod(parsed["image/class/label"] - 1,
                                     num_classes)
            return prep(image), tf.cast(label, tf.int32)
        what = "%d TFRecord shard(s)" % len(shards)
    else:
        paths, labels, classes = _folder_files(data_dir)
        ds = tf.data.Dataset.from_tensor_slices((paths, labels))
        ds = ds.shard(world_size, rank) if len(paths) >= world_size else ds
        ds = ds.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)

        def parse(path, label):
            image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
            return prep(image), tf.cast(label % num_classes, tf.int32)
        what = "image folder, %d JPEG(s) in %d class(es)" % (len(paths),
                                                             classes)
    ds = ds.repeat().map(parse, num_parallel_calls=parallel)
    ds = ds.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return ds, what
