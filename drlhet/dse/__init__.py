"""Performance model and design-space exploration (docs/design.md section 5).

Zhang, Meng, Prasanna, TPDS 2023, Sec. 6: profile the primitives on the devices that exist,
model the ones that do not from device sheets, predict every mapping's training throughput and
pick the best. The pure model (no JAX, no training stack):

* `drlhet.dse.model`: `Model` (the iteration model), `Place`, `Prediction`;
* `drlhet.dse.shapes`: `Shapes`, the sizes the cost models need;
* `drlhet.dse.devices`: device sheets (``sheets/*.json``) and the GPU and FPGA cost models.

The parts that run things:

* `drlhet.dse.trace`: `shapes_of`, the shapes of a run traced from its trainer;
* `drlhet.dse.key`: `ProfileKey`, what a profile depends on;
* `drlhet.dse.profile`: `profile_config`, the measured costs here;
* `drlhet.dse.cache`: `ProfileCache`, profiles kept as JSON in a folder the caller names;
* `drlhet.dse.baselines`: the paper-style Python-level buffer's profile and the baseline
  families;
* `drlhet.dse.build`: `build_model` (profiles from the cache, measured when missing),
  `merge_models`;
* `drlhet.dse.search`: `enumerate_mappings` and `search` (every mapping the registry offers,
  ranked);
* `drlhet.dse.measure`: `measure_mapping` (runs a mapping with the scheduler).

The ``drlhet profile`` and ``drlhet dse`` commands (`drlhet.cli.dse`) drive them. This package
module imports nothing, so that importing the pure model does not import JAX.
"""
