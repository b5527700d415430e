"""dlrun PyTorch harness: the model definitions and what is counted on them
(parameters, forward multiply-adds).  Standard library + torch; runs on
Python >= 3.6 with PyTorch >= 1.0.

The models and their naming are described in ``harness_pytorch.py``'s notes.
Importing this module builds nothing.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from harness_pytorch_common import NUM_CLASSES, HarnessError


def _flatten(x):
    # nn.Flatten is newer than the oldest supported torch; reshape (unlike
    # view) also copes with channels-last activations.
    return x.reshape(x.size(0), -1)


class AlexNet(nn.Module):
    """torchvision AlexNet (61.10 M parameters)."""

    def __init__(self, num_classes=NUM_CLASSES):
        super(AlexNet, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(_flatten(x))


class _BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None,
                 stride_on_3x3=True):
        super(_BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None,
                 stride_on_3x3=True):
        super(_Bottleneck, self).__init__()
        # v1.5: stride on the 3x3 convolution; v1: on the first 1x1.
        stride_1x1, stride_3x3 = (1, stride) if stride_on_3x3 else (stride, 1)
        self.conv1 = nn.Conv2d(inplanes, planes, 1, stride=stride_1x1,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride_3x3,
                               padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """ResNet for 224x224 ImageNet; ``stride_on_3x3`` selects v1.5 (True)
    or v1 (False) bottleneck blocks."""

    def __init__(self, block, layers, stride_on_3x3=True,
                 num_classes=NUM_CLASSES):
        super(ResNet, self).__init__()
        self.inplanes = 64
        self.stride_on_3x3 = stride_on_3x3
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0], 1)
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out",
                                        nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1,
                          stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample,
                        self.stride_on_3x3)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, 1, None,
                                self.stride_on_3x3))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(_flatten(self.avgpool(x)))


_VGG16_CFG = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
              512, 512, 512, "M", 512, 512, 512, "M"]


class VGG16(nn.Module):
    """torchvision VGG-16, configuration D, no batch norm (138.36 M)."""

    def __init__(self, num_classes=NUM_CLASSES):
        super(VGG16, self).__init__()
        layers = []
        in_ch = 3
        for v in _VGG16_CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers.append(nn.Conv2d(in_ch, v, kernel_size=3, padding=1))
                layers.append(nn.ReLU(inplace=True))
                in_ch = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(4096, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out",
                                        nonlinearity="relu")
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(_flatten(x))


class _BasicConv2d(nn.Module):
    def __init__(self, in_ch, out_ch, kernel_size, stride=1, padding=0):
        super(_BasicConv2d, self).__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, kernel_size, stride=stride,
                              padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(out_ch, eps=0.001)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)), inplace=True)


class _InceptionA(nn.Module):
    def __init__(self, in_ch, pool_features):
        super(_InceptionA, self).__init__()
        self.branch1x1 = _BasicConv2d(in_ch, 64, 1)
        self.branch5x5_1 = _BasicConv2d(in_ch, 48, 1)
        self.branch5x5_2 = _BasicConv2d(48, 64, 5, padding=2)
        self.branch3x3dbl_1 = _BasicConv2d(in_ch, 64, 1)
        self.branch3x3dbl_2 = _BasicConv2d(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = _BasicConv2d(96, 96, 3, padding=1)
        self.branch_pool = _BasicConv2d(in_ch, pool_features, 1)

    def forward(self, x):
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([b1, b5, b3, bp], 1)


class _InceptionB(nn.Module):
    def __init__(self, in_ch):
        super(_InceptionB, self).__init__()
        self.branch3x3 = _BasicConv2d(in_ch, 384, 3, stride=2)
        self.branch3x3dbl_1 = _BasicConv2d(in_ch, 64, 1)
        self.branch3x3dbl_2 = _BasicConv2d(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = _BasicConv2d(96, 96, 3, stride=2)

    def forward(self, x):
        b3 = self.branch3x3(x)
        bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = F.max_pool2d(x, 3, stride=2)
        return torch.cat([b3, bd, bp], 1)


class _InceptionC(nn.Module):
    def __init__(self, in_ch, c7):
        super(_InceptionC, self).__init__()
        self.branch1x1 = _BasicConv2d(in_ch, 192, 1)
        self.branch7x7_1 = _BasicConv2d(in_ch, c7, 1)
        self.branch7x7_2 = _BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7_3 = _BasicConv2d(c7, 192, (7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = _BasicConv2d(in_ch, c7, 1)
        self.branch7x7dbl_2 = _BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = _BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = _BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = _BasicConv2d(c7, 192, (1, 7), padding=(0, 3))
        self.branch_pool = _BasicConv2d(in_ch, 192, 1)

    def forward(self, x):
        b1 = self.branch1x1(x)
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        bd = self.branch7x7dbl_1(x)
        bd = self.branch7x7dbl_3(self.branch7x7dbl_2(bd))
        bd = self.branch7x7dbl_5(self.branch7x7dbl_4(bd))
        bp = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([b1, b7, bd, bp], 1)


class _InceptionD(nn.Module):
    def __init__(self, in_ch):
        super(_InceptionD, self).__init__()
        self.branch3x3_1 = _BasicConv2d(in_ch, 192, 1)
        self.branch3x3_2 = _BasicConv2d(192, 320, 3, stride=2)
        self.branch7x7x3_1 = _BasicConv2d(in_ch, 192, 1)
        self.branch7x7x3_2 = _BasicConv2d(192, 192, (1, 7), padding=(0, 3))
        self.branch7x7x3_3 = _BasicConv2d(192, 192, (7, 1), padding=(3, 0))
        self.branch7x7x3_4 = _BasicConv2d(192, 192, 3, stride=2)

    def forward(self, x):
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_2(self.branch7x7x3_1(x))
        b7 = self.branch7x7x3_4(self.branch7x7x3_3(b7))
        bp = F.max_pool2d(x, 3, stride=2)
        return torch.cat([b3, b7, bp], 1)


class _InceptionE(nn.Module):
    def __init__(self, in_ch):
        super(_InceptionE, self).__init__()
        self.branch1x1 = _BasicConv2d(in_ch, 320, 1)
        self.branch3x3_1 = _BasicConv2d(in_ch, 384, 1)
        self.branch3x3_2a = _BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3_2b = _BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = _BasicConv2d(in_ch, 448, 1)
        self.branch3x3dbl_2 = _BasicConv2d(448, 384, 3, padding=1)
        self.branch3x3dbl_3a = _BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = _BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.branch_pool = _BasicConv2d(in_ch, 192, 1)

    def forward(self, x):
        b1 = self.branch1x1(x)
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        bd = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        bd = torch.cat([self.branch3x3dbl_3a(bd), self.branch3x3dbl_3b(bd)],
                       1)
        bp = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([b1, b3, bd, bp], 1)


class Inception3(nn.Module):
    """torchvision Inception-v3 without the auxiliary head (23.83 M)."""

    def __init__(self, num_classes=NUM_CLASSES):
        super(Inception3, self).__init__()
        self.Conv2d_1a_3x3 = _BasicConv2d(3, 32, 3, stride=2)
        self.Conv2d_2a_3x3 = _BasicConv2d(32, 32, 3)
        self.Conv2d_2b_3x3 = _BasicConv2d(32, 64, 3, padding=1)
        self.Conv2d_3b_1x1 = _BasicConv2d(64, 80, 1)
        self.Conv2d_4a_3x3 = _BasicConv2d(80, 192, 3)
        self.Mixed_5b = _InceptionA(192, pool_features=32)
        self.Mixed_5c = _InceptionA(256, pool_features=64)
        self.Mixed_5d = _InceptionA(288, pool_features=64)
        self.Mixed_6a = _InceptionB(288)
        self.Mixed_6b = _InceptionC(768, c7=128)
        self.Mixed_6c = _InceptionC(768, c7=160)
        self.Mixed_6d = _InceptionC(768, c7=160)
        self.Mixed_6e = _InceptionC(768, c7=192)
        self.Mixed_7a = _InceptionD(768)
        self.Mixed_7b = _InceptionE(1280)
        self.Mixed_7c = _InceptionE(2048)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=0.5)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
        x = F.max_pool2d(x, 3, stride=2)
        x = self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x))
        x = F.max_pool2d(x, 3, stride=2)
        x = self.Mixed_5d(self.Mixed_5c(self.Mixed_5b(x)))
        x = self.Mixed_6a(x)
        x = self.Mixed_6e(self.Mixed_6d(self.Mixed_6c(self.Mixed_6b(x))))
        x = self.Mixed_7c(self.Mixed_7b(self.Mixed_7a(x)))
        x = self.dropout(self.avgpool(x))
        return self.fc(_flatten(x))


class LeNet(nn.Module):
    """tf_cnn_benchmarks lenet on 3x28x28 inputs (see the module notes)."""

    def __init__(self, num_classes=NUM_CLASSES):
        super(LeNet, self).__init__()
        self.conv1 = nn.Conv2d(3, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        x = F.relu(self.fc1(_flatten(x)))
        return self.fc2(x)


class Trivial(nn.Module):
    """A tiny model for smoke tests (not a benchmark)."""

    def __init__(self, num_classes=NUM_CLASSES):
        super(Trivial, self).__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv(x))))
        return self.fc(_flatten(x))


def _resnet(block, layers, v15):
    return lambda: ResNet(block, layers, stride_on_3x3=v15)


# name -> (constructor, default input size (C, H, W))
_MODELS = {
    "alexnet": (AlexNet, (3, 224, 224)),
    "resnet18": (_resnet(_BasicBlock, [2, 2, 2, 2], False), (3, 224, 224)),
    "resnet34": (_resnet(_BasicBlock, [3, 4, 6, 3], False), (3, 224, 224)),
    "resnet50": (_resnet(_Bottleneck, [3, 4, 6, 3], False), (3, 224, 224)),
    "resnet101": (_resnet(_Bottleneck, [3, 4, 23, 3], False), (3, 224, 224)),
    "resnet152": (_resnet(_Bottleneck, [3, 8, 36, 3], False), (3, 224, 224)),
    "resnet50_v1.5": (_resnet(_Bottleneck, [3, 4, 6, 3], True),
                      (3, 224, 224)),
    "resnet101_v1.5": (_resnet(_Bottleneck, [3, 4, 23, 3], True),
                       (3, 224, 224)),
    "resnet152_v1.5": (_resnet(_Bottleneck, [3, 8, 36, 3], True),
                       (3, 224, 224)),
    "vgg16": (VGG16, (3, 224, 224)),
    "inception3": (Inception3, (3, 299, 299)),
    "lenet": (LeNet, (3, 28, 28)),
    "trivial": (Trivial, (3, 32, 32)),
}

MODEL_NAMES = ("alexnet", "resnet18", "resnet34", "resnet50", "resnet101",
               "resnet152", "resnet50_v1.5", "resnet101_v1.5",
               "resnet152_v1.5", "vgg16", "inception3", "lenet", "trivial")


def _check_model_name(name):
    if name not in _MODELS:
        raise HarnessError("unknown model %r (choose from: %s)"
                           % (name, ", ".join(MODEL_NAMES)))


def build_model(name):
    """A fresh ``nn.Module`` for model ``name`` (1000 classes, on CPU)."""
    _check_model_name(name)
    return _MODELS[name][0]()


def default_image_size(name):
    """Default input size of model ``name`` as a (C, H, W) tuple."""
    _check_model_name(name)
    return _MODELS[name][1]


def count_params(model):
    """Number of parameters (weights and biases, not buffers)."""
    return int(sum(p.numel() for p in model.parameters()))


def _chw(image_size):
    if isinstance(image_size, int):
        return (3, image_size, image_size)
    size = tuple(int(v) for v in image_size)
    if len(size) == 2:
        return (3,) + size
    if len(size) != 3:
        raise ValueError("image_size must be H, (H, W) or (C, H, W)")
    return size


def count_forward_macs(model, image_size):
    """Multiply-adds of convolutions and fully connected layers for one
    image of ``image_size`` ((C, H, W), (H, W) or an int), counted with
    forward hooks on a one-image forward pass in eval mode."""
    c, h, w = _chw(image_size)
    total = [0]

    def conv_hook(module, inputs, output):
        kh, kw = module.kernel_size
        per_output = (module.in_channels // module.groups) * kh * kw
        total[0] += int(output[0].numel()) * per_output

    def linear_hook(module, inputs, output):
        rows = int(output[0].numel()) // module.out_features
        total[0] += rows * module.in_features * module.out_features

    handles = []
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            handles.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Linear):
            handles.append(m.register_forward_hook(linear_hook))
    was_training = model.training
    device = None
    for p in model.parameters():
        device = p.device
        break
    try:
        model.eval()
        with torch.no_grad():
            x = torch.zeros(1, c, h, w)
            if device is not None:
                x = x.to(device)
            model(x)
    finally:
        for hd in handles:
            hd.remove()
        model.train(was_training)
    return total[0]


def _meta_model(name):
    """Model ``name`` built without allocating or initialising weights, if
    this PyTorch can (torch.device as a context manager); else None."""
    device_cls = getattr(torch, "device", None)
    if device_cls is None or not hasattr(device_cls, "__enter__"):
        return None
    try:
        with torch.device("meta"):
            return build_model(name)
    except Exception:
        return None


def describe_model(name):
    """The ``--describe`` record of model ``name`` as a dict."""
    size = default_image_size(name)
    model = _meta_model(name)
    macs = None
    if model is not None:
        try:
            macs = count_forward_macs(model, size)
        except Exception:
            model = None
    if model is None:
        model = build_model(name)
        macs = count_forward_macs(model, size)
    return {
        "model": name,
        "params": count_params(model),
        "forward_macs": int(macs),
        "image_size": list(size),
        "num_classes": NUM_CLASSES,
    }
