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

Reading order: `schedules` (naive, GPipe, 1F1B, interleaved, ZB-H1, eager 1F1B as data);
`dualpipe` (and its scheme in `schemes_dualpipe`); `validate` (checker and deadlock simulator);
`cost` (ideal timelines, bubbles, bytes); `stages` (a stage of the reference model);
`partition` (per-layer profiling, DP balancing); `executor` and `zb_backward` (one rank's step;
B/W split); `reshard_boundary` (a boundary that is a cross-mesh resharding); `unet_stages`,
`unet_executor`, `unet_cost` (the 3-D U-Net's skips across stages); `lamp` (LAMP's partition);
`draw` (Gantt charts); `schemes`, `schemes_reshard`, `torch_pp`; `explore` and its parts,
`exercises` and `bench` (notebook 04, `python -m parlab bench pipeline`). Each module in a line:
docs/pipeline.md, `parlab.pipeline`.
"""
