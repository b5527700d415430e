"""dlrun TensorFlow 2 harness: the models.  Standard library + TensorFlow
(Keras); runs on Python >= 3.6.  Which model comes from where is described
in ``harness_tensorflow.py``'s notes.

Every model is built channels-last (NHWC, Keras' default) and ends in
logits (no softmax): the loss applies it.
"""

from harness_common import NUM_CLASSES, HarnessError

# name -> (builder key, default square input size)
_MODELS = {
    "trivial": ("trivial", 32),
    "lenet": ("lenet", 28),
    "alexnet": ("alexnet", 224),
    "resnet18": ("basic:2,2,2,2", 224),
    "resnet34": ("basic:3,4,6,3", 224),
    "resnet50": ("keras:ResNet50", 224),
    "resnet101": ("keras:ResNet101", 224),
    "resnet152": ("keras:ResNet152", 224),
    "resnet50_v1.5": ("bottleneck:3,4,6,3", 224),
    "resnet101_v1.5": ("bottleneck:3,4,23,3", 224),
    "resnet152_v1.5": ("bottleneck:3,8,36,3", 224),
    "vgg16": ("keras:VGG16", 224),
    "inception3": ("keras:InceptionV3", 299),
}
MODEL_NAMES = sorted(_MODELS)
# The smallest input each keras.applications model accepts.
_MIN_SIZE = {"keras:InceptionV3": 75}


def default_image_size(name):
    return _MODELS[name][1]


def model_source(name):
    """Where the definition comes from: "keras.applications" or "dlrun"."""
    return ("keras.applications" if _MODELS[name][0].startswith("keras:")
            else "dlrun")


def build_model(name, image_size, num_classes=NUM_CLASSES):
    """A Keras model taking float images [N, size, size, 3] to logits."""
    import keras
    key = _MODELS[name][0]
    minimum = _MIN_SIZE.get(key, 32 if key.startswith("keras:") else 1)
    if image_size < minimum:
        raise HarnessError("--image-size %d is too small for %s; valid: >= %d"
                           % (image_size, name, minimum))
    shape = (image_size, image_size, 3)
    if key.startswith("keras:"):
        builder = getattr(keras.applications, key.split(":", 1)[1])
        return builder(weights=None, include_top=True, input_shape=shape,
                       classes=num_classes, classifier_activation=None)
    inputs = keras.Input(shape=shape)
    kind, _, stages = key.partition(":")
    if kind == "trivial":
        x = _conv_bn(inputs, 8, 3, 1, relu=True)
        x = keras.layers.GlobalAveragePooling2D()(x)
    elif kind == "lenet":
        x = _lenet(inputs)
    elif kind == "alexnet":
        x = _alexnet(inputs)
    else:
        blocks = [int(n) for n in stages.split(",")]
        x = _resnet(inputs, blocks, bottleneck=(kind == "bottleneck"))
    outputs = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, outputs, name=name.replace(".", "_"))


def _conv_bn(x, filters, kernel, stride, relu):
    import keras
    x = keras.layers.Conv2D(filters, kernel, strides=stride, padding="same",
                            use_bias=False)(x)
    x = keras.layers.BatchNormalization(epsilon=1e-5, momentum=0.9)(x)
    return keras.layers.ReLU()(x) if relu else x


def _resnet(x, blocks, bottleneck):
    """torchvision's ResNet: basic blocks (18, 34) or bottlenecks with the
    stride on the 3x3 convolution (v1.5)."""
    import keras
    x = _conv_bn(x, 64, 7, 2, relu=True)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same")(x)
    width = 64
    for stage, count in enumerate(blocks):
        for index in range(count):
            stride = 2 if stage > 0 and index == 0 else 1
            out = width * 4 if bottleneck else width
            shortcut = x
            if stride != 1 or x.shape[-1] != out:
                shortcut = _conv_bn(x, out, 1, stride, relu=False)
            if bottleneck:
                y = _conv_bn(x, width, 1, 1, relu=True)
                y = _conv_bn(y, width, 3, stride, relu=True)
                y = _conv_bn(y, out, 1, 1, relu=False)
            else:
                y = _conv_bn(x, width, 3, stride, relu=True)
                y = _conv_bn(y, out, 3, 1, relu=False)
            x = keras.layers.ReLU()(keras.layers.Add()([shortcut, y]))
        width *= 2
    return keras.layers.GlobalAveragePooling2D()(x)


def _lenet(x):
    """tf_cnn_benchmarks' lenet: conv 32 5x5, pool, conv 64 5x5, pool,
    fc 512 (the classes' layer follows)."""
    import keras
    for filters in (32, 64):
        x = keras.layers.Conv2D(filters, 5, padding="same",
                                activation="relu")(x)
        x = keras.layers.MaxPooling2D(2, strides=2, padding="same")(x)
    x = keras.layers.Flatten()(x)
    return keras.layers.Dense(512, activation="relu")(x)


def _alexnet(x):
    """torchvision's AlexNet, with its adaptive 6x6 average pooling (an
    identity at 224x224)."""
    import keras
    layers = keras.layers
    x = layers.ZeroPadding2D(2)(x)
    x = layers.Conv2D(64, 11, strides=4, activation="relu")(x)
    x = layers.MaxPooling2D(3, strides=2)(x)
    x = layers.Conv2D(192, 5, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D(3, strides=2)(x)
    for filters in (384, 256, 256):
        x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D(3, strides=2)(x)
    if tuple(x.shape[1:3]) != (6, 6):
        x = _AdaptiveAveragePooling(6)(x)
    x = layers.Flatten()(x)
    for _ in range(2):
        x = layers.Dropout(0.5)(x)
        x = layers.Dense(4096, activation="relu")(x)
    return x


def _AdaptiveAveragePooling(size):
    """PyTorch's AdaptiveAvgPool2d(size) (bin i spans rows
    floor(i*H/size) .. ceil((i+1)*H/size)) as a Keras layer."""
    import keras
    import tensorflow as tf

    class AdaptiveAveragePooling(keras.layers.Layer):
        def call(self, x):
            h, w = int(x.shape[1]), int(x.shape[2])
            rows = []
            for i in range(size):
                r0, r1 = i * h // size, -(-(i + 1) * h // size)
                cols = [tf.reduce_mean(x[:, r0:r1, j * w // size:
                                         -(-(j + 1) * w // size), :],
                                       axis=[1, 2])
                        for j in range(size)]
                rows.append(tf.stack(cols, axis=1))
            return tf.stack(rows, axis=1)

        def compute_output_shape(self, shape):
            return (shape[0], size, size, shape[3])
    return AdaptiveAveragePooling()


def count_params(model):
    return int(sum(int(v.shape.num_elements()) for v in model.trainable_weights))
