"""Training a TopK SAE as Gao et al. (2024) do: the reconstruction loss plus AuxK on dead latents, a data
initialisation, Adam with a warm-up and a decay to zero, unit-norm decoder rows; or a Matryoshka TopK SAE as saev
trains them (``TrainConfig(matryoshka=(64, 256, 1024))``): nested prefixes of the dictionary, each reconstructing on
its own, their errors averaged.

    sae, history = train_sae(source, SAEConfig(d_in=192, latents=1536, k=16), TrainConfig(epochs=8))

The source is read in order, shuffled within a buffer (``vitviz.sae.data``). A checkpoint written after each epoch
lets an interrupted run resume where it stopped; a run is deterministic for a seed on one device. The memory a run
needs is checked before anything is allocated (``check_memory``).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
from tqdm import tqdm

from vitviz.sae.data import Source, shuffled_batches, statistics
from vitviz.sae.errors import SAEError, SAEMemoryError
from vitviz.sae.model import SAEConfig, TopKSAE


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 8  # passes over the source
    batch: int = 4096  # tokens per step
    lr: float | None = None  # Adam's rate; None: Gao et al.'s 2e-4 / sqrt(latents / 2**14)
    schedule: Literal["warmup-decay", "constant"] = "warmup-decay"  # linear warm-up, then linear decay to 0
    warmup: float = 0.05  # fraction of the steps spent warming up
    decay: float = 0.2  # fraction of the steps, at the end, over which the rate falls to 0
    aux_alpha: float = 1 / 32  # weight of the AuxK loss (0: off)
    dead_after: int = 100_000  # a latent that has not fired for this many tokens is dead (AuxK's candidates)
    init: Literal["data", "random"] = "data"  # decoder rows from data points, or random unit directions
    b_dec_init: Literal["median", "mean", "zero"] = "median"  # the geometric median of a sample (Weiszfeld)
    sample: int = 16_384  # tokens sampled for the initialisation
    buffer: int = 262_144  # tokens shuffled together
    clip: float | None = 1.0  # gradient norm clipping
    seed: int = 0
    device: str = "auto"  # "cpu", "cuda", or "auto": CUDA when present
    # Matryoshka (saev's objective, Nabeshima; Bussmann et al. 2025): the sizes m_1 < m_2 < ... of nested prefixes
    # of the dictionary; each prefix's latents reconstruct the input on their own and the loss is the mean of their
    # errors. The whole dictionary is always the last prefix (added when not listed). None: plain TopK
    matryoshka: tuple[int, ...] | None = None

    def prefixes(self, latents: int) -> tuple[int, ...]:
        """The prefix sizes the loss uses for a dictionary of ``latents``: (latents,) for plain TopK."""
        sizes = tuple(int(m) for m in self.matryoshka or ())
        if any(not 1 <= m <= latents for m in sizes) or any(a >= b for a, b in zip(sizes, sizes[1:])):
            raise SAEError(
                f"--matryoshka sizes must increase and lie in [1, latents = {latents}]; got {','.join(map(str, sizes))}"
            )
        return sizes if sizes and sizes[-1] == latents else (*sizes, latents)


def device_of(name: str) -> torch.device:
    return torch.device("cuda" if name == "auto" and torch.cuda.is_available() else "cpu" if name == "auto" else name)


def memory_needed(config: SAEConfig, train: TrainConfig) -> int:
    """Bytes a run needs: weights, gradients and Adam's two moments (4 copies of 2 N d floats) and a step's
    (batch, N) tensors (about 6: pre-activations, their gradient, top-k and AuxK temporaries), plus the buffer."""
    weights = 4 * (2 * config.latents * config.d_in + config.latents + config.d_in) * 4
    step = 6 * train.batch * config.latents * 4
    return weights + step + 2 * train.buffer * config.d_in * 4


def memory_available(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return 2**62  # unknown: do not refuse


def check_memory(config: SAEConfig, train: TrainConfig, device: torch.device) -> None:
    """Refuse, before allocating, a run that would not fit in the device's free memory."""
    needed, free = memory_needed(config, train), memory_available(device)
    if needed > free:
        raise SAEMemoryError(
            f"{config.latents:,} latents x {config.d_in} wide with batches of {train.batch:,} need about "
            f"{needed / 2**30:.1f} GiB (weights, Adam state, one step); {device.type} has {free / 2**30:.1f} GiB free."
            f" Use fewer latents or a smaller batch"
        )


def geometric_median(points: torch.Tensor, iterations: int = 30) -> torch.Tensor:
    """(m, d) -> (d,) the point minimising the sum of distances (Weiszfeld's iterations from the mean)."""
    median = points.mean(dim=0)
    for _ in range(iterations):
        weights = 1 / (points - median).norm(dim=-1).clamp_min(1e-8)  # (m,)
        median = (weights[:, None] * points).sum(dim=0) / weights.sum()
    return median


@torch.no_grad()
def initialise(
    sae: TopKSAE,
    mean: torch.Tensor,
    scale: torch.Tensor,
    sample: torch.Tensor,
    train: TrainConfig,
    generator: torch.Generator,
) -> None:
    """Normalisation statistics, b_dec from the sample, decoder rows from sample points (or random), W_enc = W_dec^T."""
    sae.mean.copy_(mean)
    sae.scale.copy_(scale)
    z = sae.normalise(sample.to(sae.mean.device))  # (m, d)
    if train.b_dec_init == "median":
        sae.b_dec.copy_(geometric_median(z))
    elif train.b_dec_init == "mean":
        sae.b_dec.copy_(z.mean(dim=0))
    N = sae.config.latents
    if train.init == "data":  # unit directions from b_dec to sample points; random ones if the sample is short
        picked = torch.randperm(len(z), generator=generator)[:N].to(z.device)
        sae.W_dec[: len(picked)] = z[picked] - sae.b_dec
    sae.normalise_decoder_()
    sae.W_enc.copy_(sae.W_dec.T)
    # k codes of about |z| each along near-parallel directions would decode to about k times z (an initial loss of
    # 6 where 1 is the mean's): scale the encoder by the c minimising |z - b_dec - c r|² over the sample, r the
    # decoded codes at c = 1
    sae.eval()
    r = (
        sae.decode_sparse(*sae.top_k(sae.pre_activations(z))) - sae.b_dec
        if sae.config.activation == "topk"
        else sae.activate(sae.pre_activations(z)) @ sae.W_dec
    )
    c = float((r * (z - sae.b_dec)).sum() / r.square().sum().clamp_min(1e-12))
    if c > 0:
        sae.W_enc.mul_(c)
    sae.train()


def auxk_loss(sae: TopKSAE, pre: torch.Tensor, residual: torch.Tensor, dead: torch.Tensor) -> torch.Tensor:
    """Gao et al.'s AuxK: the residual e = z - ẑ (B, d) reconstructed from the top aux_k dead latents of the
    pre-activations (B, N), as a normalised MSE: |e - ê|² / |e - mean(e)|². 0 when no latent is dead."""
    candidates = dead.nonzero().squeeze(1)  # (dead,)
    if len(candidates) == 0:
        return pre.new_zeros(())
    values = pre.index_select(1, candidates).relu()  # (B, dead)
    if len(candidates) > sae.config.aux_k:  # else every dead latent takes part: no top-k to take
        kept, chosen = values.topk(sae.config.aux_k, dim=-1, sorted=False)  # (B, aux_k)
        values = torch.zeros_like(values).scatter(-1, chosen, kept)
    estimate = values @ sae.W_dec.index_select(
        0, candidates
    )  # (B, d): a (B, dead) x (dead, d) product, at most one dense one
    residual = residual.detach()
    spread = (residual - residual.mean(dim=0)).square().sum(dim=-1).mean().clamp_min(1e-12)
    return (estimate - residual).square().sum(dim=-1).mean() / spread


def prefix_reconstructions(
    sae: TopKSAE, codes: torch.Tensor | tuple[torch.Tensor, torch.Tensor], prefixes: tuple[int, ...]
) -> list[torch.Tensor]:
    """Normalised reconstructions (B, d), one per prefix size m, each from latents 0..m-1 alone: the codes (dense
    (B, N), or a TopK's kept (values, indices), (B, k) each) of the other latents count as 0. As saev's Matryoshka,
    the codes are chosen once over the whole dictionary, and b_dec belongs to every prefix."""
    if isinstance(codes, tuple):
        values, indices = codes
        N = sae.config.latents
        return [sae.decode_sparse(values if m >= N else values * (indices < m), indices) for m in prefixes]
    return [codes[:, :m] @ sae.W_dec[:m] + sae.b_dec for m in prefixes]


def losses(
    sae: TopKSAE, z: torch.Tensor, dead: torch.Tensor, aux_alpha: float, prefixes: tuple[int, ...] | None = None
) -> tuple[torch.Tensor, ...]:
    """One normalised batch z (B, d) -> (total loss, reconstruction loss, AuxK loss, firings per latent (N,)).

    The reconstruction loss is the squared error summed over features, averaged over tokens; with Matryoshka
    ``prefixes`` (the last one the whole dictionary), it is the mean over prefixes of each prefix's own error, as
    saev weighs them. AuxK reconstructs the whole dictionary's residual."""
    prefixes = prefixes or (sae.config.latents,)
    pre = sae.pre_activations(z)  # (B, N)
    if sae.config.activation == "topk":
        values, indices = sae.top_k(pre)  # (B, k) each
        codes = (values, indices)
        fired = torch.zeros_like(sae.b_enc).index_add_(0, indices.flatten(), (values > 0).flatten().float())
    else:
        codes = sae.activate(pre)
        fired = (codes > 0).float().sum(dim=0)
    estimates = prefix_reconstructions(sae, codes, prefixes)  # the whole dictionary's last
    mse = torch.stack([(estimate - z).square().sum(dim=-1).mean() for estimate in estimates]).mean()
    aux = auxk_loss(sae, pre, z - estimates[-1], dead) if aux_alpha > 0 else mse.new_zeros(())
    return mse + aux_alpha * aux, mse, aux, fired.detach()


def learning_rate(step: int, total: int, peak: float, train: TrainConfig) -> float:
    if train.schedule == "constant":
        return peak
    warmup, decay = max(1, int(train.warmup * total)), max(1, int(train.decay * total))
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * min(1.0, (total - step) / decay)


def train_sae(
    source: Source,
    config: SAEConfig,
    train: TrainConfig = TrainConfig(),
    checkpoint: Path | None = None,
    progress: bool = True,
) -> tuple[TopKSAE, list[dict]]:
    """Train an SAE on the tokens of ``source``; returns it (eval mode, on the CPU) and one record per epoch (loss,
    MSE, AuxK, dead fraction, seconds, tokens per second). With ``checkpoint``, each epoch ends by writing it, and
    a run finding one resumes after its last epoch (the configurations must match)."""
    if train.epochs < 1 or train.batch < 1:
        raise SAEError(f"epochs and batch must be at least 1; got {train.epochs} and {train.batch}")
    prefixes = train.prefixes(config.latents)
    device = device_of(train.device)
    check_memory(config, train, device)
    generator = torch.Generator().manual_seed(train.seed)
    torch.manual_seed(train.seed)
    sae = TopKSAE(config).to(device)
    peak = train.lr if train.lr is not None else 2e-4 / math.sqrt(config.latents / 2**14)
    optimiser = torch.optim.Adam(sae.parameters(), lr=peak, eps=6.25e-10)
    since_fired = torch.zeros(config.latents, dtype=torch.long, device=device)  # tokens since each latent fired
    history: list[dict] = []
    start_epoch = 0
    if checkpoint is not None and Path(checkpoint).exists():
        state = torch.load(checkpoint, map_location=device, weights_only=False)
        if state["config"] != config.to_dict() or state["train"] != asdict(train):
            raise SAEError(f"{checkpoint} is from another run (other settings); remove it or use another path")
        sae.load_state_dict(state["sae"])
        optimiser.load_state_dict(state["optimiser"])
        since_fired, history, start_epoch, tokens = (
            state["since_fired"],
            state["history"],
            state["epoch"] + 1,
            state["tokens"],
        )
        generator.set_state(state["generator"])
    else:
        stats = statistics(source, train.sample, generator)
        initialise(sae, stats.mean, stats.scale, stats.sample, train, generator)
        tokens = stats.tokens
    steps_per_epoch = math.ceil(tokens / train.batch)
    total = train.epochs * steps_per_epoch
    for epoch in range(start_epoch, train.epochs):
        sae.train()
        shuffle = torch.Generator().manual_seed(train.seed * 100_003 + epoch)  # resumable: depends on the epoch only
        sums = torch.zeros(3, dtype=torch.float64)
        began = time.perf_counter()
        bar = tqdm(
            total=steps_per_epoch,
            desc=f"SAE epoch {epoch + 1}/{train.epochs}",
            disable=not progress or None,
            file=sys.stderr,
            leave=False,
        )
        for index, batch in enumerate(shuffled_batches(source, train.batch, train.buffer, shuffle)):
            step = epoch * steps_per_epoch + index
            for group in optimiser.param_groups:
                group["lr"] = learning_rate(step, total, peak, train)
            z = sae.normalise(batch.to(device, non_blocking=True))
            dead = since_fired >= train.dead_after
            loss, mse, aux, fired = losses(sae, z, dead, train.aux_alpha, prefixes)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            sae.remove_parallel_gradient_()
            if train.clip:
                torch.nn.utils.clip_grad_norm_(sae.parameters(), train.clip)
            optimiser.step()
            sae.normalise_decoder_()
            since_fired = torch.where(fired > 0, 0, since_fired + len(batch))
            sums += torch.tensor([mse.item() * len(batch), aux.item() * len(batch), len(batch)], dtype=torch.float64)
            bar.update()
        bar.close()
        seconds = time.perf_counter() - began
        history.append(
            {
                "epoch": epoch + 1,
                "mse": float(sums[0] / sums[2]),
                "aux": float(sums[1] / sums[2]),
                "dead_fraction": float((since_fired >= train.dead_after).float().mean()),
                "seconds": seconds,
                "tokens_per_s": float(sums[2]) / seconds,
            }
        )
        if checkpoint is not None:
            Path(checkpoint).parent.mkdir(parents=True, exist_ok=True)
            temporary = Path(f"{checkpoint}.partial")  # a half-written checkpoint never reads as complete
            state = {
                "sae": sae.state_dict(),
                "optimiser": optimiser.state_dict(),
                "config": config.to_dict(),
                "train": asdict(train),
                "epoch": epoch,
                "since_fired": since_fired,
                "history": history,
                "tokens": tokens,
                "generator": generator.get_state(),
            }
            torch.save(state, temporary)
            temporary.replace(checkpoint)
    return sae.eval().cpu(), history
