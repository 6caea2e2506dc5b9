"""CNN (lib/models/cnn.{h,cc}): a small convolutional classifier."""
import dataclasses

import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass(frozen=True)
class CNNOptions:
    conv1: int  # channels of the first convolution
    conv2: int  # channels of the second
    hidden: int  # width of the first linear layer
    classes: int = 10


class CNN(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.conv1 = nn.Conv2d(3, o.conv1, 3, padding=1)
        self.conv2 = nn.Conv2d(o.conv1, o.conv2, 3, padding=1)
        self.fc1 = nn.Linear(o.conv2 * 8 * 8, o.hidden)
        self.fc2 = nn.Linear(o.hidden, o.classes)

    def forward(self, x):
        # x: (N, 3, 32, 32) -> logits (N, classes).
        y = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (N, c1, 16, 16)
        y = F.max_pool2d(F.relu(self.conv2(y)), 2)  # (N, c2, 8, 8)
        return self.fc2(F.relu(self.fc1(y.flatten(1))))  # (N, classes)
