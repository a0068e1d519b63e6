"""Chapter 04 — pipeline parallelism, built from data: schedules are per-rank action lists that are validated,
executed with `parlab.core.comm.Comm` send/recv, drawn, and costed by the same code.

Papers: Huang et al., "GPipe" (NeurIPS 2019); Narayanan et al., "PipeDream" (SOSP 2019) and
"Memory-Efficient Pipeline-Parallel DNN Training" (ICML 2021: 1F1B, PipeDream-Flush); Narayanan
et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
(SC 2021: interleaved 1F1B); Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024); Zhuang
et al., "On Optimizing the Communication of Model Parallelism" (MLSys 2023: AlpaComm); Zhu et
al., "LAMP" (MICCAI 2020); DeepSeek-AI, "DeepSeek-V3 Technical Report" (2024, §3.2.1: DualPipe);
She et al., "Automatic Operator-level Parallelism Planning for Distributed Deep Learning" (2025,
arXiv 2503.09357: operators placed and ordered).

Reading order:

- `schedules`: generators for naive model parallelism, GPipe (Huang et al. 2019), 1F1B
  (PipeDream-Flush, Narayanan et al. 2019/2021), interleaved 1F1B (Narayanan et al., SC 2021) and
  zero-bubble ZB-H1 (Qi et al., ICLR 2024) and eager 1F1B (Zhuang et al., "On Optimizing the
  Communication of Model Parallelism", MLSys 2023: AlpaComm).
- `dualpipe`: DualPipe (DeepSeek-V3 report, §3.2.1) as data: micro-batches fed from both ends,
  two stages per rank, F&B pairs; its scheme `pp-dualpipe` is in `schemes_dualpipe`.
- `validate`: the checker and list-scheduling simulator (dependencies, matched messages, deadlock).
- `cost`: ideal timelines and bubble fractions; the closed forms of the bytes a pipeline sends.
- `stages`: a stage of the reference model (its embed / blocks / head), so exactness follows.
- `partition`: per-layer profiling and dynamic-programming balancing of stages.
- `executor`: runs one rank's action list for one training step; `zb_backward`: zero bubble's
  backward split into B (input gradient) and W (weight gradients).
- `reshard_boundary`: a stage boundary that is a cross-mesh resharding (AlpaComm), with the link at the
  sender, so an early send (eager 1F1B) can hide its transfer.
- `unet_stages`, `unet_executor`, `unet_cost`: the 3-D U-Net (LAMP) cut into stages whose skip
  connections travel from an early stage straight to a late one, on their own channels, and
  the closed forms of those bytes.
- `lamp`: LAMP's automated partition of the U-Net (its code's `balance_by_size` / `_by_time`):
  each layer's activation and parameter bytes (or time) profiled once, then the exact min-max
  contiguous split; `partition="lamp"` (by memory) or `"balanced"` (by time).
- `draw`: Gantt charts of ideal and measured timelines.
- `schemes` (with `schemes_reshard`: `pp-reshard`, stages on meshes of replicas), `torch_pp`:
  the registered schemes; `explore` (with `explore.stages`, `explore.eager`, `explore.dualpipe`,
  `explore.unet`, `explore.lamp`, `explore.summary`), `exercises` and `bench`: notebook 04 and
  `python -m parlab bench pipeline`.
"""
