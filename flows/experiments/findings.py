"""The known findings: predictions of the papers that the full runs measure to fail, each with its reason.

Examples pass ``known_finding=findings.known(example, prediction)`` to `RunRecord.add_prediction`, ``REPORT.md``
links each to its entry (:func:`report_markdown`), the page docs/findings.md explains each, and
``tests/test_examples.py`` holds the list true at ``--quick`` size. The numbers in ``measured`` are those of
the full runs (``python -m flows reproduce``)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["KNOWN_FINDINGS", "Finding", "by_anchor", "known", "markdown", "report_markdown"]

#: the documentation page that explains every finding (one heading per finding, anchored by its id)
PAGE = "docs/findings.md"


@dataclass(frozen=True)
class Finding:
    """A disagreement with a paper: its claim, what the full run measures, and why (one line each).

    ``at_quick``: the ``--quick`` run decides the prediction too, and it fails there as well. One finding may
    cover several predictions (the same claim at several settings).
    """

    title: str
    claim: str
    measured: str
    reason: str
    at_quick: bool = True

    @property
    def anchor(self) -> str:
        """The finding's id: the anchor a Markdown renderer (GitHub's rule) gives a heading of its title, e.g.
        ``scan-and-snap-fig-4-the-rarest-distinct-tokens``; stored as a prediction's ``known_finding``."""
        return _anchor(self.title)

    @property
    def note(self) -> str:
        """The text appended to the ``expected`` of a prediction that is this finding."""
        return f"; known finding: {self.reason} ({PAGE})"


def _anchor(title: str) -> str:
    # GitHub's heading ids: lower case, drop what is not a letter, digit, underscore, hyphen or space, then
    # each space becomes a hyphen (runs are not merged)
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


_RAREST_DT = Finding(
    title="Scan and Snap, Fig. 4: the rarest distinct tokens",
    claim="every distinct-token logit rises (Tian et al. 2023, Theorem 2a)",
    measured="at eta_Y = 1 the rarest DT of each class (P(l|n) = 0.0065) falls in every one of 8 SGD runs of 100 "
    "iterations (seeds 0 .. 7): mean change -0.0145 +- 0.0016 and -0.0108 +- 0.0011 (standard errors; about the "
    "same after 30); at eta_Y = 10 the same tokens end within 0.0004 +- 0.0004 of zero, a sign one run's noise "
    "decides, and every other DT rises (the prediction holds on the mean over the runs); the T -> inf flow from "
    "the same start raises every DT logit (smallest +0.013, +0.0046)",
    reason="a finite-T effect, outside Theorem 2a's T -> inf limit: the network at T = 128 lowers the rarest "
    "distinct token, the flow does not",
)
_ADAM_DT = Finding(
    title="Scan and Snap, Fig. 5: Adam",
    claim="Theorem 2a's rising distinct-token logits, under Adam (Fig. 5 shows Adam without a claim)",
    measured="over 8 Adam runs of 100 steps (seeds 0 .. 7) at eta = 0.1 four DT logits of the two classes fall "
    "(mean change down to -0.182 +- 0.009; no run raises all 20); at eta = 0.5 every mean change is positive "
    "(smallest +0.59 +- 0.32, though one DT falls in 3 of the 8 runs) and at eta = 1 every run raises all 20; the "
    "ones that fall are the most frequent DTs of a class",
    reason="Theorem 2a is a gradient-flow result and Adam's normalised steps are not that flow",
)
_SNAP_EXPONENTS = Finding(
    title="Scan and Snap: the snap time's exponents",
    claim="t0 = 2 K ln M / eta_Y, exponents (1, 1, -1) in (K, ln M, eta_Y) (Theorem 4)",
    measured="(0.82, 0.49, -0.90) from the reduced flow over K = 2 .. 8, M = 10^2 .. 10^6, eta_Y = 0.5 .. 2",
    reason="the law is asymptotic in M: t_snap / (K ln M / eta_Y) is 1.3 .. 3.6 at M = 100 and 0.98 .. 1.1 at M = 10^6",
)
_SNAP_ETA_Z = Finding(
    title="Scan and Snap: the snap time and eta_Z",
    claim="the snap time depends on eta_Y only (Theorem 4)",
    measured="eta_Z = 4 snaps earlier than eta_Z = 1 in every cell, |ln ratio| up to 0.62 (K = 2, M = 100, "
    "eta_Y = 2; median 0.056)",
    reason="asymptotic in M as well: |ln ratio| is 0.14 .. 0.62 at M = 100 and 0.02 .. 0.06 at M >= 10^5",
)
_CERTIFICATE = Finding(
    title="Mean field: stationary laws that are not global minimisers",
    claim="for lam small enough the flow's stationary laws minimise Q_lam globally (Gao et al. 2024; P6, P7: "
    "first-variation certificate >= 0)",
    measured="certificate -0.17 at every stationary law of lam = 1e-2 (4 restarts and the wide M = 64 network; "
    "about 0 at lam = 1e-1; at lam <= 1e-3 the flows still move at the end of the run)",
    reason="HuberizedReLU is not homogeneous in W1, so stationarity does not balance |W1| and |W2|, and moving "
    "neuron mass to the origin lowers Q, a non-local move the particle flow cannot make",
    at_quick=False,
)

_OPTIM_NO_SNAP = Finding(
    title="Scan and Snap under sign descent: no snap",
    claim="after the scan the growth of Z slows and the attention freezes (Tian et al. 2023, Theorems 4-5, under "
    "gradient flow)",
    measured="on the sign flow (eps = 1e-6) over t = 0 .. 1.6, while the loss falls from 3.5 to 1.8e-4, max |Z| = t: "
    "growth rate over the last fifth / first fifth 0.96 (sign SGD at lr 0.025: 1.09), attention rate ratio "
    "1.22 (1.15); gradient flow 0.098 and 0.11 at t = 100, the Adam flow 0.026 and 0.043 at t = 20",
    reason="sign descent moves every coordinate with a nonzero gradient at unit speed, so the shrinking gradient "
    "that slows gradient flow slows nothing until it vanishes",
)
_OPTIM_DT = Finding(
    title="Scan and Snap under sign descent and Adam: the frequent distinct tokens",
    claim="every distinct-token logit rises (Theorem 2a, under gradient flow)",
    measured="the sign flow raises 8/20 (t = 1.6; sign SGD at lr 0.025: 10/20), the Adam flow (c1 = 1, c2 = 0.01) "
    "10/20 (t = 20; Adam at lr 0.025: 12/20); the ones that fall are the most frequent DTs of each class "
    "(lowest -0.71 and -0.43); the gradient flow raises 20/20 (smallest +0.0074 at t = 100)",
    reason="Theorem 2a is a gradient-flow result and the normalised steps of sign descent and Adam are not that "
    "flow (as for Fig. 5's Adam networks, where the frequent DTs fall too)",
)
_ADAM_OVERSHOOT = Finding(
    title="Scan and Snap under Adam: the scan overshoots",
    claim="the common-token attention only falls (Theorem 2: CT logits fall, DT logits rise, under gradient flow)",
    measured="the Adam flow takes the common-token mass from 0.645 to 0.239 at t = 5.2 and back up to 0.275 at "
    "t = 20 (the Adam network at lr 0.025: 0.270); its mean CT logit goes -1.40 -> -1.28 meanwhile; the "
    "gradient flow's mass falls monotonically to 0.511 at t = 100",
    reason="Theorem 2 is a gradient-flow result; after Adam's fast first phase (loss 1.3e-3 by t = 2) its flow raises "
    "the CT logits again and lowers the middle-frequency DT logits",
)

_PDE_W2_TAILS = Finding(
    title="Mean-field PDE: the W2 gap of the particles",
    claim="particles approximate the Wasserstein gradient flow with a gap ~ M^(-1/2) (Gao et al. 2024, Theorem "
    "3.3's sqrt(log L / M) at fixed depth), measured in W2 per depth slice against the grid PDE",
    measured="the Q and R gaps fall at slope -0.53 (T = 0) and -0.51, -0.52 (T = 0.02) with -1/2 inside their "
    "intervals; the W2 gaps at -0.46 and -0.47, intervals ending at -0.485 (8 groups of 4 clouds, M up to 4096)",
    reason="the 1-D empirical W2 of a law with near-Gaussian tails converges more slowly than M^(-1/2) (E W2^2 ~ "
    "J2 / M with J2 = int F(1 - F)/f large; Bobkov and Ledoux 2019): a property of W2 between a cloud and its "
    "law, not a gap of the particle flow",
    at_quick=False,
)
_PDE_POSITIVITY = Finding(
    title="Mean-field PDE: negative cell masses at the solver's tolerance",
    claim="the grid law stays non-negative (the continuity equation preserves positivity)",
    measured="at 400 cells the smallest cell mass is -1.5e-11 (T = 0) and -3.6e-10 (T = 0.02) with tsit5 at atol "
    "1e-10; Heun at constant steps under the CFL bound keeps every mass >= 0 exactly (tests)",
    reason="the adaptive Runge-Kutta solver of the full run is not positivity preserving; its negative masses stay "
    "at the level of its tolerances",
    at_quick=False,
)

#: (example stem, prediction name) -> Finding
KNOWN_FINDINGS: dict[tuple[str, str], Finding] = {
    ("scan_snap_fig4", "etaY1_etaZ1_distinct_logits_rise_network_fraction"): _RAREST_DT,
    ("scan_snap_fig5", "eta0.1_distinct_logits_rise_network_fraction"): _ADAM_DT,
    ("scan_snap_predictions", "snap_time_exponents_K_lnM_etaY"): _SNAP_EXPONENTS,
    ("scan_snap_predictions", "snap_time_independent_of_eta_Z"): _SNAP_ETA_Z,
    ("mean_field_lambda", "certificate_at_stationary_laws"): _CERTIFICATE,
    ("scan_snap_adam", "sign_snap_Z_growth_slows"): _OPTIM_NO_SNAP,
    ("scan_snap_adam", "sign_attention_freezes"): _OPTIM_NO_SNAP,
    ("scan_snap_adam", "sign_distinct_logits_rise_fraction"): _OPTIM_DT,
    ("scan_snap_adam", "adam_distinct_logits_rise_fraction"): _OPTIM_DT,
    ("scan_snap_adam", "adam_common_attention_monotone"): _ADAM_OVERSHOOT,
    ("mean_field_pde", "gap_W2_T0"): _PDE_W2_TAILS,
    ("mean_field_pde", "gap_W2_T0.02"): _PDE_W2_TAILS,
    ("mean_field_pde", "nonnegative_T0"): _PDE_POSITIVITY,
    ("mean_field_pde", "nonnegative_T0.02"): _PDE_POSITIVITY,
}


def known(example: str, prediction: str) -> Finding | None:
    """The finding that prediction `prediction` of example `example` is, or None; pass it as the
    ``known_finding`` of `flows.experiments.records.RunRecord.add_prediction`."""
    return KNOWN_FINDINGS.get((example, prediction))


def by_anchor(anchor: str) -> Finding | None:
    """The finding whose :attr:`Finding.anchor` is `anchor` (a prediction's ``known_finding`` marker), or None
    (a record written before the finding was renamed or dropped)."""
    return next((f for f in KNOWN_FINDINGS.values() if f.anchor == anchor), None)


_WRAP = textwrap.TextWrapper(
    width=115, initial_indent="- ", subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
)


def markdown() -> str:
    """The known findings as a Markdown bullet list, one per finding with the predictions it covers."""
    groups: dict[int, tuple[Finding, list[tuple[str, str]]]] = {}
    for key, f in KNOWN_FINDINGS.items():
        groups.setdefault(id(f), (f, []))[1].append(key)
    lines = []
    for f, keys in groups.values():
        names = ", ".join(f"`{name}`" for _, name in keys)
        stems = ", ".join(dict.fromkeys(f"`{stem}`" for stem, _ in keys))
        quick = "" if f.at_quick else " Not decided at `--quick` size."
        text = f"**{f.title}** ({stems}: {names}). Paper: {f.claim}. Measured: {f.measured}; {f.reason}." + quick
        lines.append(_WRAP.fill(text))
    return "\n".join(lines) + "\n"


def report_markdown(anchors: Iterable[str]) -> str:
    """One ``### <title>`` entry per finding of `anchors` (in the order of `KNOWN_FINDINGS`), with its claim,
    measurement and reason: the section that ``REPORT.md`` links its known findings to. Anchors that name no
    current finding are skipped."""
    wanted = set(anchors)
    seen = {f.anchor: f for f in KNOWN_FINDINGS.values() if f.anchor in wanted}  # one Finding per anchor
    parts = []
    for f in seen.values():
        quick = "" if f.at_quick else " Not decided at `--quick` size."
        parts.append(
            f"### {f.title}\n\nPaper: {f.claim}.  \nMeasured (full run): {f.measured}.  \nWhy: {f.reason}.{quick}\n"
        )
    return "\n".join(parts)
