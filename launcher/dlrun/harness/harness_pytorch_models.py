"""dlrun PyTorch harness: the model definitions and what is counted on them
(parameters, forward multiply-adds).  Standard library + torch; runs on
Python >= 3.6 with PyTorch >= 1.0.

The models and their naming are described in ``harness_pytorch.py``'s notes.
Importing this module builds nothing.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from harness_common import NUM_CLASSES, HarnessError
from harness_pytorch_llama import LLAMA_NAMES, describe_llama, is_llama


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


def _bn_relu(owner, bn, x, residual=None):
    """relu(bn(x) [+ residual]), in place as torchvision does; the fused
    kernel stands in where ``owner.fused_bn_relu`` is set and takes this
    input (harness_pytorch_bnrelu.py; None where it does not)."""
    fused = owner.fused_bn_relu
    out = fused(bn, x, residual) if fused is not None else None
    if out is not None:
        return out
    out = bn(x)
    if residual is not None:
        out += residual
    return owner.relu(out)


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
        self.fused_bn_relu = None

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = _bn_relu(self, self.bn1, self.conv1(x))
        return _bn_relu(self, self.bn2, self.conv2(out), identity)


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
        self.fused_bn_relu = None

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = _bn_relu(self, self.bn1, self.conv1(x))
        out = _bn_relu(self, self.bn2, self.conv2(out))
        return _bn_relu(self, self.bn3, self.conv3(out), identity)


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
        self.fused_bn_relu = None
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
        x = self.maxpool(_bn_relu(self, self.bn1, self.conv1(x)))
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


# --- BERT --------------------------------------------------------------------
#
# BERT-base (Devlin et al.; uncased vocabulary) with the task heads of the
# code Ren et al. fine-tuned it with (pytorch-pretrained-BERT): a multiple-
# choice head for SWAG (4 endings, max sequence length 80) and a span head
# for SQuAD (max sequence length 384).  Weights are randomly initialised as
# BERT initialises them (normal, std 0.02); no pretrained checkpoint is read.

BERT_BASE = {"vocab_size": 30522, "hidden": 768, "layers": 12, "heads": 12,
             "intermediate": 3072, "max_positions": 512, "type_vocab": 2,
             "dropout": 0.1}
# model name -> (task, max sequence length, sequences per instance)
BERT_TASKS = {"bert_swag": ("swag", 80, 4), "bert_squad": ("squad", 384, 1)}
# The fused kernels where this PyTorch has them (the same arithmetic).
_GELU = getattr(F, "gelu", None)
_SDPA = getattr(F, "scaled_dot_product_attention", None)


def _gelu(x):
    if _GELU is not None:
        return _GELU(x)
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class _AttentionProducts(nn.Module):
    """softmax(q k^T / sqrt(d) + mask) v with dropout on the probabilities:
    the two matrix products of attention, a module so that they are counted
    (``count_forward_macs``) like the weight layers."""

    def __init__(self, dropout):
        super(_AttentionProducts, self).__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask):
        if _SDPA is not None:
            p = self.dropout.p if self.training else 0.0
            return _SDPA(q, k, v, attn_mask=mask.to(q.dtype), dropout_p=p)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
        probs = self.dropout(F.softmax(scores + mask.to(scores.dtype), dim=-1))
        return torch.matmul(probs, v)


class _BertLayer(nn.Module):
    def __init__(self, cfg):
        super(_BertLayer, self).__init__()
        hidden, self.heads = cfg["hidden"], cfg["heads"]
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attention = _AttentionProducts(cfg["dropout"])
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, cfg["intermediate"])
        self.output = nn.Linear(cfg["intermediate"], hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(cfg["dropout"])

    def _heads(self, x):
        b, n, hidden = x.size()
        x = x.view(b, n, self.heads, hidden // self.heads)
        return x.permute(0, 2, 1, 3)

    def forward(self, x, mask):
        context = self.attention(self._heads(self.query(x)),
                                 self._heads(self.key(x)),
                                 self._heads(self.value(x)), mask)
        b, h, n, d = context.size()
        context = context.permute(0, 2, 1, 3).contiguous().view(b, n, h * d)
        x = self.attention_norm(
            x + self.dropout(self.attention_output(context)))
        y = self.output(_gelu(self.intermediate(x)))
        return self.output_norm(x + self.dropout(y))


class _Bert(nn.Module):
    """The BERT encoder: embeddings, ``num_layers`` transformer layers and
    the pooler (tanh of a linear layer on the first token)."""

    def __init__(self, num_layers, cfg=BERT_BASE):
        super(_Bert, self).__init__()
        hidden = cfg["hidden"]
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], hidden)
        self.position_embeddings = nn.Embedding(cfg["max_positions"], hidden)
        self.token_type_embeddings = nn.Embedding(cfg["type_vocab"], hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(cfg["dropout"])
        self.layers = nn.ModuleList([_BertLayer(cfg)
                                     for _ in range(num_layers)])
        self.pooler = nn.Linear(hidden, hidden)

    def forward(self, input_ids, token_type_ids, attention_mask, pool):
        n = input_ids.size(1)
        positions = torch.arange(n, dtype=torch.long,
                                 device=input_ids.device)
        x = (self.word_embeddings(input_ids)
             + self.position_embeddings(positions).unsqueeze(0)
             + self.token_type_embeddings(token_type_ids))
        x = self.dropout(self.embedding_norm(x))
        # Padding (attention_mask 0) gets -10000 before the softmax, as in
        # BERT's code: every position costs the same, padded or not.
        mask = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        if not pool:
            return x
        return torch.tanh(self.pooler(x[:, 0]))


def _init_bert(model):
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear):
            nn.init.constant_(m.bias, 0)


class BertMultipleChoice(nn.Module):
    """BERT-base for SWAG: each of an example's ``choices`` sequences is
    encoded and pooled, a linear layer scores it; the logits are (batch,
    choices).  Inputs are (batch, choices, seq_length)."""

    def __init__(self, num_layers=12):
        super(BertMultipleChoice, self).__init__()
        self.bert = _Bert(num_layers)
        self.dropout = nn.Dropout(BERT_BASE["dropout"])
        self.classifier = nn.Linear(BERT_BASE["hidden"], 1)
        _init_bert(self)

    def forward(self, input_ids, token_type_ids, attention_mask):
        b, choices, n = input_ids.size()
        pooled = self.bert(input_ids.view(-1, n), token_type_ids.view(-1, n),
                           attention_mask.view(-1, n), pool=True)
        return self.classifier(self.dropout(pooled)).view(b, choices)


class BertSpanExtraction(nn.Module):
    """BERT-base for SQuAD: a linear layer on every token gives the logits
    of the answer's start and end, each (batch, seq_length).

    The pooler is built, as in the reference code, whose BERT model always
    carries it (Ren et al.'s Table II counts it: 109.5 M), but this head does
    not use it; it is frozen so that DistributedDataParallel, which expects a
    gradient for every trainable parameter, works on every PyTorch release."""

    def __init__(self, num_layers=12):
        super(BertSpanExtraction, self).__init__()
        self.bert = _Bert(num_layers)
        self.qa_outputs = nn.Linear(BERT_BASE["hidden"], 2)
        _init_bert(self)
        for p in self.bert.pooler.parameters():
            p.requires_grad = False

    def forward(self, input_ids, token_type_ids, attention_mask):
        x = self.bert(input_ids, token_type_ids, attention_mask, pool=False)
        start, end = self.qa_outputs(x).split(1, dim=-1)
        return start.squeeze(-1), end.squeeze(-1)


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
               "resnet152_v1.5", "vgg16", "inception3", "lenet", "trivial",
               "bert_swag", "bert_squad") + LLAMA_NAMES
_BERT_HEADS = {"swag": BertMultipleChoice, "squad": BertSpanExtraction}


def _check_model_name(name):
    if name not in _MODELS and name not in BERT_TASKS and not is_llama(name):
        raise HarnessError("unknown model %r (choose from: %s)"
                           % (name, ", ".join(MODEL_NAMES)))


def is_bert(name):
    """Whether model ``name`` is a BERT model (token input) rather than an
    image model."""
    _check_model_name(name)
    return name in BERT_TASKS


def build_model(name, num_layers=None):
    """A fresh ``nn.Module`` for model ``name`` (on CPU).  ``num_layers``
    (BERT only, default 12) makes a shallower BERT for quick runs.  The
    LLMs are built by harness_pytorch_llama.build_llama."""
    if is_llama(name):
        raise HarnessError("model %s is built by build_llama" % name)
    if is_bert(name):
        return _BERT_HEADS[BERT_TASKS[name][0]](num_layers or
                                                BERT_BASE["layers"])
    if num_layers is not None:
        raise HarnessError("--num-layers applies to the BERT models, not to "
                           "%s" % name)
    return _MODELS[name][0]()


def default_image_size(name):
    """Default input size of image model ``name`` as a (C, H, W) tuple."""
    if is_bert(name) or is_llama(name):
        raise HarnessError("model %s reads tokens, not images" % name)
    return _MODELS[name][1]


def bert_task(name, seq_length=None):
    """(task, sequence length, sequences per instance) of BERT model
    ``name``; ``seq_length`` replaces the task's maximum sequence length."""
    if not is_bert(name):
        raise HarnessError("--seq-length applies to the BERT models, not to "
                           "%s" % name)
    task, length, per_instance = BERT_TASKS[name]
    if seq_length is not None:
        if not 1 <= seq_length <= BERT_BASE["max_positions"]:
            raise HarnessError("--seq-length %d: BERT takes 1 to %d tokens"
                               % (seq_length, BERT_BASE["max_positions"]))
        length = seq_length
    return task, length, per_instance


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
    return _forward_macs(model, [torch.zeros(1, c, h, w)])


def bert_input(seq_length, per_instance, batch_size=1):
    """Zero token ids, token types and an all-ones attention mask for
    ``batch_size`` instances: (batch, seq_length), or (batch, per_instance,
    seq_length) for multiple choice."""
    shape = ((batch_size, seq_length) if per_instance == 1
             else (batch_size, per_instance, seq_length))
    zeros = torch.zeros(shape, dtype=torch.long)
    return [zeros, zeros, torch.ones(shape, dtype=torch.long)]


def _forward_macs(model, inputs):
    """Multiply-adds of convolutions, fully connected layers and attention
    products for one forward pass over ``inputs``, counted with forward
    hooks in eval mode."""
    total = [0]

    def conv_hook(module, args, output):
        kh, kw = module.kernel_size
        per_output = (module.in_channels // module.groups) * kh * kw
        total[0] += int(output.numel()) * per_output

    def linear_hook(module, args, output):
        rows = int(output.numel()) // module.out_features
        total[0] += rows * module.in_features * module.out_features

    def attention_hook(module, args, output):
        q, keys = args[0], args[1].size(-2)
        # Per head q k^T is (n x d)(d x keys), probabilities times v is
        # (n x keys)(keys x d).
        total[0] += int(q.numel()) * keys + int(output.numel()) * keys

    hooks = ((nn.Conv2d, conv_hook), (nn.Linear, linear_hook),
             (_AttentionProducts, attention_hook))
    handles = []
    for m in model.modules():
        for cls, hook in hooks:
            if isinstance(m, cls):
                handles.append(m.register_forward_hook(hook))
    was_training = model.training
    device = None
    for p in model.parameters():
        device = p.device
        break
    try:
        model.eval()
        with torch.no_grad():
            if device is not None:
                inputs = [x.to(device) for x in inputs]
            model(*inputs)
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
    """The ``--describe`` record of model ``name`` as a dict.  Image models:
    forward multiply-adds per image.  BERT models: per sequence (a SWAG
    example is 4 sequences), counting every matrix product - the weight
    layers and attention's two products.  LLMs: per token, from the FLOPs
    per token (harness_pytorch_llama.describe_llama)."""
    if is_llama(name):
        return describe_llama(name)
    if is_bert(name):
        task, length, per_instance = bert_task(name)
        inputs = bert_input(length, per_instance)
    else:
        size = default_image_size(name)
        inputs = [torch.zeros((1,) + tuple(size))]
    model = _meta_model(name)
    macs = None
    if model is not None:
        try:
            macs = _forward_macs(model, inputs)
        except Exception:
            model = None
    if model is None:
        model = build_model(name)
        macs = _forward_macs(model, inputs)
    record = {"model": name, "params": count_params(model)}
    if not is_bert(name):
        record.update({"forward_macs": int(macs), "image_size": list(size),
                       "num_classes": NUM_CLASSES})
        return record
    record.update({
        "forward_macs": int(macs) // per_instance,
        "forward_macs_per": "sequence",
        "sequences_per_instance": per_instance,
        "seq_length": length,
        "task": task,
        "num_layers": BERT_BASE["layers"],
        "trainable_params": int(sum(p.numel() for p in model.parameters()
                                    if p.requires_grad)),
    })
    return record
