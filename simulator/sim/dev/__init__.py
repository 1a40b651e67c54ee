"""The development harness: the embedded stack (`cloudburst dev`), the demos and drills
(`cloudburst demo`), which compose the product's worker, trigger and workflows with the
simulated cluster and clouds. Part of the simulator's distribution, never the product's: the
command line plugs `dev` and `demo` in only where it is installed. The benches of bench/ share
its `topology` (the production topology as separate processes) and `planner_inputs`."""
