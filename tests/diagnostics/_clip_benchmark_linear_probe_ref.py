# Reference only, for tests/diagnostics/test_linear_probe.py: CLIP_benchmark's linear probe.
#
# Vendored from clip_benchmark 1.6.2 (PyPI wheel clip_benchmark-1.6.2-py2.py3-none-any.whl),
# files clip_benchmark/metrics/linear_probe.py (cosine_lr, FeatureDataset, train, infer,
# find_peak, evaluate) and clip_benchmark/metrics/zeroshot_classification.py (accuracy).
# https://github.com/LAION-AI/CLIP_benchmark
#
# MIT License, Copyright (c) 2022, Mehdi Cherti. Permission is hereby granted, free of charge,
# to any person obtaining a copy of this software and associated documentation files (the
# "Software"), to deal in the Software without restriction, including without limitation the
# rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the
# Software, and to permit persons to whom the Software is furnished to do so, subject to the
# following conditions: The above copyright notice and this permission notice shall be included
# in all copies or substantial portions of the Software. THE SOFTWARE IS PROVIDED "AS IS",
# WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES
# OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN
# ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE
# OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
#
# Why vendored: the package requires open_clip_torch, torchvision, webdataset and transformers
# (they would pull a CUDA torch into CI), and its functions call `.cuda()` (evaluate asserts
# device == 'cuda'). The algorithm is kept line for line; the only changes, to run on CPU on
# features held in memory:
#   - `.cuda()` calls dropped (tensors and model stay on the CPU; DataParallel with no device
#     is a pass-through, as upstream on a machine without GPUs);
#   - `evaluate` takes the train / val / test feature tensors instead of featurizing a model
#     and caching the features under feature_root (its featurization half is left out), and
#     returns None where upstream prints 'insufficient data for this eval' and returns;
#   - `accuracy`: `float(array([x]))` -> `float(array([x])[0])` (an error under NumPy >= 2.4);
#   - progress output (tqdm, prints, classification_report) and `pin_memory=True` (a warning
#     on CPU) removed; the returned dict is upstream's.
import numpy as np
import torch
from sklearn.metrics import balanced_accuracy_score
from torch.utils.data import DataLoader, Dataset


def accuracy(output, target, topk=(1,)):
    pred = output.topk(max(topk), 1, True, True)[1].t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))
    n = len(target)
    return [
        float(correct[:k].reshape(-1).float().sum(0, keepdim=True).cpu().numpy()[0]) / n
        for k in topk
    ]


def assign_learning_rate(param_group, new_lr):
    param_group["lr"] = new_lr


def _warmup_lr(base_lr, warmup_length, step):
    return base_lr * (step + 1) / warmup_length


def cosine_lr(optimizer, base_lrs, warmup_length, steps):
    if not isinstance(base_lrs, list):
        base_lrs = [base_lrs for _ in optimizer.param_groups]
    assert len(base_lrs) == len(optimizer.param_groups)

    def _lr_adjuster(step):
        for param_group, base_lr in zip(optimizer.param_groups, base_lrs):
            if step < warmup_length:
                lr = _warmup_lr(base_lr, warmup_length, step)
            else:
                e = step - warmup_length
                es = steps - warmup_length
                lr = 0.5 * (1 + np.cos(np.pi * e / es)) * base_lr
            assign_learning_rate(param_group, lr)

    return _lr_adjuster


class FeatureDataset(Dataset):
    def __init__(self, features, targets):
        self.features = features
        self.targets = targets

    def __len__(self):
        return len(self.features)

    def __getitem__(self, i):
        return self.features[i], self.targets[i]


def train(dataloader, input_shape, output_shape, weight_decay, lr, epochs, amp, device, seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(input_shape, output_shape)
    devices = [x for x in range(torch.cuda.device_count())]
    model = torch.nn.DataParallel(model, device_ids=devices)
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=lr,
        weight_decay=weight_decay,
    )
    criterion = torch.nn.CrossEntropyLoss()

    len_loader = len(dataloader)
    scheduler = cosine_lr(optimizer, lr, 0.0, epochs * len_loader)

    for epoch in range(epochs):
        for i, (x, y) in enumerate(dataloader):
            step = i + epoch * len_loader
            scheduler(step)

            optimizer.zero_grad()
            with torch.autocast(device, enabled=amp):
                pred = model(x)
                loss = criterion(pred, y)

            loss.backward()
            optimizer.step()
    return model


def infer(model, dataloader, amp, device):
    true, pred = [], []
    with torch.no_grad():
        for x, y in dataloader:
            x = x.to(device)
            y = y.to(device)

            with torch.autocast(device, enabled=amp):
                logits = model(x)

            pred.append(logits.cpu())
            true.append(y.cpu())

    logits = torch.cat(pred)
    target = torch.cat(true)
    return logits, target


def find_peak(
    wd_list, idxs, train_loader, val_loader, input_shape, output_shape, lr, epochs, amp, device,
    verbose, seed,
):  # fmt: skip
    best_wd_idx, max_acc = 0, 0
    for idx in idxs:
        weight_decay = wd_list[idx]
        model = train(
            train_loader, input_shape, output_shape, weight_decay, lr, epochs, amp, device, seed
        )
        logits, target = infer(model, val_loader, amp, device)
        (acc1,) = accuracy(logits.float(), target.float(), topk=(1,))
        if max_acc < acc1:
            best_wd_idx, max_acc = idx, acc1
    return best_wd_idx


def evaluate(
    features, targets, features_val, targets_val, features_test, targets_test, fewshot_k,
    batch_size, lr, epochs, seed, device="cpu", normalize=True, amp=False, verbose=False,
):  # fmt: skip
    """Upstream `evaluate` from the loaded features on; `features_val` None = no val split."""
    num_workers = 0
    # second, make a dataloader with k features per class. if k = -1, use all features.
    length = len(features)
    perm = [p.item() for p in torch.randperm(length)]
    idxs = []
    counts = {}
    num_classes = 0

    for p in perm:
        target = targets[p].item()
        if target not in counts:
            counts[target] = 0
            num_classes += 1

        if fewshot_k < 0 or counts[target] < fewshot_k:
            counts[target] += 1
            idxs.append(p)

    for c in counts:
        if fewshot_k > 0 and counts[c] != fewshot_k:
            return None

    train_features = features[idxs]
    train_labels = targets[idxs]
    if features_val is not None:
        feature_val_dset = FeatureDataset(features_val, targets_val)
        feature_val_loader = DataLoader(
            feature_val_dset, batch_size=batch_size, shuffle=True, num_workers=num_workers
        )
        feature_train_val_dset = FeatureDataset(
            np.concatenate((train_features, features_val)),
            np.concatenate((train_labels, targets_val)),
        )
        feature_train_val_loader = DataLoader(
            feature_train_val_dset, batch_size=batch_size, shuffle=True, num_workers=num_workers
        )
    feature_train_dset = FeatureDataset(train_features, train_labels)
    feature_train_loader = DataLoader(
        feature_train_dset, batch_size=batch_size, shuffle=True, num_workers=num_workers
    )
    feature_test_dset = FeatureDataset(features_test, targets_test)
    feature_test_loader = DataLoader(
        feature_test_dset, batch_size=batch_size, shuffle=True, num_workers=num_workers
    )
    input_shape, output_shape = features[0].shape[0], targets.max().item() + 1
    if features_val is not None:
        # perform openAI-like hyperparameter sweep
        # https://arxiv.org/pdf/2103.00020.pdf A.3
        # instead of scikit-learn LBFGS use FCNNs with AdamW
        wd_list = np.logspace(-6, 2, num=97).tolist()
        wd_list_init = np.logspace(-6, 2, num=7).tolist()
        wd_init_idx = [i for i, val in enumerate(wd_list) if val in wd_list_init]
        peak_idx = find_peak(
            wd_list, wd_init_idx, feature_train_loader, feature_val_loader, input_shape,
            output_shape, lr, epochs, amp, device, verbose, seed,
        )  # fmt: skip
        step_span = 8
        while step_span > 0:
            left, right = max(peak_idx - step_span, 0), min(peak_idx + step_span, len(wd_list) - 1)
            peak_idx = find_peak(
                wd_list, [left, peak_idx, right], feature_train_loader, feature_val_loader,
                input_shape, output_shape, lr, epochs, amp, device, verbose, seed,
            )  # fmt: skip
            step_span //= 2
        best_wd = wd_list[peak_idx]
        if fewshot_k < 0:
            # if we are doing full training, we use the full training set (train+val)
            train_loader = feature_train_val_loader
        else:
            # if we are doing few-shot learning, we use the few-shot training set only
            # as adding the validation set will train on more data than intended
            train_loader = feature_train_loader
    else:
        best_wd = 0
        train_loader = feature_train_loader

    final_model = train(
        train_loader, input_shape, output_shape, best_wd, lr, epochs, amp, device, seed
    )
    logits, target = infer(final_model, feature_test_loader, amp, device)
    pred = logits.argmax(axis=1)

    # measure accuracy
    if target.max() >= 5:
        acc1, acc5 = accuracy(logits.float(), target.float(), topk=(1, 5))
    else:
        (acc1,) = accuracy(logits.float(), target.float(), topk=(1,))
        acc5 = float("nan")
    mean_per_class_recall = balanced_accuracy_score(target, pred)
    return {
        "lp_acc1": acc1,
        "lp_acc5": acc5,
        "lp_mean_per_class_recall": mean_per_class_recall,
        "weight_decay": best_wd,
        "epochs": epochs,
        "seed": seed,
        "fewshot_k": fewshot_k,
        "normalized": normalize,
    }
