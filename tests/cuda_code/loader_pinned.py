"""A data loader with pin_memory=True whose batches go to the GPU with .to(device, non_blocking=True): the dataset
(32 MiB) stays on the host, only the model, its gradients and each batch are device memory."""
import json

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
features = torch.randn(32768, 256)  # 32 MiB on the host
labels = torch.randint(0, 64, (32768,))
loader = DataLoader(TensorDataset(features, labels), batch_size=512, shuffle=False, pin_memory=True)
model = nn.Linear(256, 64).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(loader):
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step == 3:
        break
del x, y, loss
print(json.dumps({"memory_allocated": torch.cuda.memory_allocated(), "max_memory_allocated":
                  torch.cuda.max_memory_allocated(), "max_memory_reserved": torch.cuda.max_memory_reserved(),
                  "weight_device": str(model.weight.device), "features_device": str(features.device)}))
