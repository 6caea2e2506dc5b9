"""ResNet (lib/models/resnet.{h,cc}): torchvision's ResNets."""
import dataclasses

import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass(frozen=True)
class ResNetOptions:
    bottleneck: bool  # Bottleneck (expansion 4) or BasicBlock
    blocks: tuple
    widths: tuple = (64, 128, 256, 512)
    stem: int = 64  # channels of the 7x7 stem
    classes: int = 1000


def _conv(cin, cout, k, stride, pad):
    return nn.Conv2d(cin, cout, k, stride=stride, padding=pad, bias=False)


class ResNetBlock(nn.Module):
    """BasicBlock (two 3x3) or Bottleneck (1x1, 3x3 with the stride, 1x1)."""

    def __init__(self, bottleneck, cin, planes, stride):
        super().__init__()
        cout = planes * (4 if bottleneck else 1)
        if bottleneck:
            self.conv1 = _conv(cin, planes, 1, 1, 0)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = _conv(planes, planes, 3, stride, 1)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = _conv(planes, cout, 1, 1, 0)
            self.bn3 = nn.BatchNorm2d(cout)
        else:
            self.conv1 = _conv(cin, planes, 3, stride, 1)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = _conv(planes, planes, 3, 1, 1)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = None
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(_conv(cin, cout, 1, stride, 0), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        if self.conv3 is not None:
            y = self.bn3(self.conv3(F.relu(self.bn2(self.conv2(y)))))
        else:
            y = self.bn2(self.conv2(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.conv1 = _conv(3, o.stem, 7, 2, 3)
        self.bn1 = nn.BatchNorm2d(o.stem)
        cin = o.stem
        for stage in range(4):
            blocks = []
            for b in range(o.blocks[stage]):
                stride = 2 if stage > 0 and b == 0 else 1
                blocks.append(ResNetBlock(o.bottleneck, cin, o.widths[stage], stride))
                cin = o.widths[stage] * (4 if o.bottleneck else 1)
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(cin, o.classes)

    def forward(self, x):
        # x: (N, 3, H, W) -> logits (N, classes).
        y = F.relu(self.bn1(self.conv1(x)))  # (N, stem, H/2, W/2)
        y = F.max_pool2d(y, 3, stride=2, padding=1)  # (N, stem, H/4, W/4)
        y = self.layer4(self.layer3(self.layer2(self.layer1(y))))
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)  # (N, C)
        return self.fc(y)
