"""dlrun PyTorch harness: what a training step consumes and what the run
reports, per kind of model - image classification (instances are images),
BERT fine-tuning (SWAG examples of 4 sequences or SQuAD windows; rates
count sequences) and LLM pretraining (instances are sequences of
--seq-length tokens; rates count tokens).  Standard library + torch; runs
on Python >= 3.6 with PyTorch >= 1.0 (the LLM needs PyTorch >= 2.0 and
says so).
"""

import torch
import torch.nn as nn

from harness_common import NUM_CLASSES, HarnessError
from harness_pytorch_data import (FixedBatches, synthetic_images,
                                  synthetic_tokens)
from harness_pytorch_features import (make_adamw, make_optimizer,
                                      resolve_channels_last)
from harness_pytorch_llama import (ADAMW_BETAS, WEIGHT_DECAY, build_llama,
                                   flops_per_token, is_llama, llama_config,
                                   lm_loss, matmul_params)
from harness_pytorch_models import (BERT_BASE, bert_task, build_model,
                                    default_image_size, is_bert)

# Defaults where --lr is not given: SGD for the CNNs; AdamW for BERT at the
# fine-tuning rate of the BERT code Ren et al. used (run_swag / run_squad).
CNN_LR = 0.01
BERT_LR = 5e-5
BERT_WEIGHT_DECAY = 0.01


def make_task(args, device_type):
    if is_llama(args.model):
        return LlmTask(args)
    if is_bert(args.model):
        return BertTask(args)
    return ImageTask(args, device_type)


def _refuse(args, options, model, kind):
    for option, attr in options:
        if getattr(args, attr, None) not in (None, False):
            raise HarnessError("%s applies to the %s, not to %s"
                               % (option, kind, model))


LLM_ONLY = (("--activation-checkpointing", "activation_checkpointing"),
            ("--matmul-gflops", "matmul_gflops"),
            ("--token-dtype", "token_dtype"))


class ImageTask(object):
    bert = llm = False
    optimizer_name = "sgd"
    per_instance = 1
    unit, dataset, step_label = "images/sec", "imagenet", "Img/sec"

    def __init__(self, args, device_type):
        _refuse(args, (("--seq-length", "seq_length"),
                       ("--num-layers", "num_layers")),
                args.model, "BERT and LLM models")
        _refuse(args, LLM_ONLY, args.model, "LLM models")
        self.lr = CNN_LR if args.lr is None else args.lr
        self.channels_last = resolve_channels_last(
            args.channels_last, args.precision, device_type)

    def build(self, args):
        return build_model(args.model)

    def batches(self, args, batch, rank, world_size, device):
        """The data under --data-dir, or one synthetic batch on the
        device."""
        if args.data_dir is not None:
            from harness_pytorch_dataset import RealBatches  # needs Pillow
            return RealBatches(args.data_dir, batch,
                               default_image_size(args.model),
                               args.data_workers, rank, world_size,
                               args.seed, device, self.channels_last)
        inputs, targets = synthetic_images(
            batch, default_image_size(args.model), NUM_CLASSES,
            args.seed + rank)
        return FixedBatches((inputs,), (targets,), device,
                            self.channels_last)

    def criterion(self, device):
        ce = nn.CrossEntropyLoss().to(device)
        return lambda out, targets: ce(out, targets[0])

    def optimizer(self, model, args, fused_mode):
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer, fused = make_optimizer(torch.optim.SGD, params,
                                          fused_mode, lr=self.lr,
                                          momentum=args.momentum)
        return optimizer, "sgd", fused

    def result_fields(self, args, timing, optimizer):
        return {
            "formula": "world_size*batch_size_per_rank*timed_steps/"
                       "wall_time_s",
            "per_rank_images_per_sec": timing["per_rank_rates"],
            "image_size": list(default_image_size(args.model)),
            "num_classes": NUM_CLASSES,
            "channels_last": self.channels_last,
            "data_format": "NHWC" if self.channels_last else "NCHW",
            "optimizer": optimizer, "lr": self.lr, "momentum": args.momentum}


class BertTask(object):
    bert, llm = True, False
    optimizer_name = "adamw"
    unit, step_label = "sequences/sec", "Seq/sec"
    channels_last = False

    def __init__(self, args):
        _refuse(args, LLM_ONLY, args.model, "LLM models")
        self.task, self.seq_length, self.per_instance = bert_task(
            args.model, args.seq_length)
        self.num_layers = args.num_layers or BERT_BASE["layers"]
        self.dataset = self.task
        self.lr = BERT_LR if args.lr is None else args.lr
        if args.channels_last == "on":
            raise HarnessError("--channels-last on: model %s reads "
                               "tokens, not images" % args.model)

    def build(self, args):
        return build_model(args.model, args.num_layers)

    def batches(self, args, batch, rank, world_size, device):
        inputs, targets = synthetic_tokens(
            batch, self.seq_length, self.per_instance,
            BERT_BASE["vocab_size"], self.task, args.seed + rank)
        return FixedBatches(inputs, targets, device, False)

    def criterion(self, device):
        ce = nn.CrossEntropyLoss().to(device)
        if self.task == "squad":  # mean of start and end
            return lambda out, targets: (ce(out[0], targets[0])
                                         + ce(out[1], targets[1])) / 2
        return lambda out, targets: ce(out, targets[0])

    def optimizer(self, model, args, fused_mode):
        params = [p for p in model.parameters() if p.requires_grad]
        return make_adamw(params, self.lr, BERT_WEIGHT_DECAY, fused_mode)

    def result_fields(self, args, timing, optimizer):
        return {
            "formula": "world_size*batch_size_per_rank*"
                       "sequences_per_instance*timed_steps/wall_time_s",
            "per_rank_sequences_per_sec": timing["per_rank_rates"],
            "instances_per_sec": timing["total"] / self.per_instance,
            "sequences_per_instance": self.per_instance,
            "task": self.task, "seq_length": self.seq_length,
            "num_layers": self.num_layers, "channels_last": False,
            "optimizer": optimizer, "lr": self.lr,
            "weight_decay": BERT_WEIGHT_DECAY}


class LlmTask(object):
    """Next-token prediction with a Llama-3-style decoder: an instance is a
    sequence of seq_length tokens, rates count tokens."""

    bert, llm = False, True
    optimizer_name = "adamw"
    unit, step_label = "tokens/sec", "Tok/sec"
    channels_last = False

    def __init__(self, args):
        if args.channels_last == "on":
            raise HarnessError("--channels-last on: model %s reads "
                               "tokens, not images" % args.model)
        self.cfg = llama_config(args.model, args.seq_length,
                                args.num_layers)
        self.seq_length = self.per_instance = self.cfg["seq_length"]
        self.num_layers = self.cfg["n_layers"]
        self.lr = self.cfg["lr"] if args.lr is None else args.lr
        self.dataset = "tokens"
        self.matmul_params = None

    def build(self, args):
        model = build_llama(args.model, args.seq_length, args.num_layers,
                            bool(args.activation_checkpointing))
        self.matmul_params = matmul_params(model)
        return model

    def flops_per_token(self):
        return flops_per_token(self.cfg, self.matmul_params)

    def batches(self, args, batch, rank, world_size, device):
        if args.data_dir is not None:
            from harness_pytorch_text import TokenWindows
            return TokenWindows(args.data_dir, batch, self.seq_length,
                                self.cfg["vocab_size"], args.seed, rank,
                                device, args.token_dtype,
                                args.max_corpus_bytes)
        from harness_pytorch_text import synthetic_windows
        inputs, targets = synthetic_windows(batch, self.seq_length,
                                            self.cfg["vocab_size"],
                                            args.seed + rank)
        return FixedBatches(inputs, targets, device, False)

    def criterion(self, device):
        return lambda out, targets: lm_loss(out, targets[0])

    def optimizer(self, model, args, fused_mode):
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer, fused = make_optimizer(
            torch.optim.AdamW, params, fused_mode, lr=self.lr,
            betas=ADAMW_BETAS, weight_decay=WEIGHT_DECAY)
        return optimizer, "adamw", fused

    def result_fields(self, args, timing, optimizer):
        cfg = self.cfg
        return {
            "formula": "world_size*devices_per_rank*batch_size_per_device*"
                       "grad_accum*seq_length*timed_steps/wall_time_s",
            "per_rank_tokens_per_sec": timing["per_rank_rates"],
            "tokens_per_sec_per_device": timing["total"]
            / timing["num_devices"],
            "sequences_per_sec": timing["total"] / self.seq_length,
            "seq_length": self.seq_length, "num_layers": self.num_layers,
            "dim": cfg["dim"], "heads": cfg["n_heads"],
            "kv_heads": cfg["n_kv_heads"], "vocab_size": cfg["vocab_size"],
            "matmul_params": self.matmul_params,
            "activation_checkpointing": bool(args.activation_checkpointing),
            "channels_last": False, "optimizer": optimizer, "lr": self.lr,
            "betas": list(ADAMW_BETAS), "weight_decay": WEIGHT_DECAY}
