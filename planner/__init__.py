"""The planner: pending pods and offerings in, the cheapest plan within a pool's limits out.

Pure: no Temporal, no Kubernetes client, no network; what it plans with (offerings, each
node's overhead, the pods) is read by its callers — the `plan_capacity` activity and
consolidation (`activities/planning/`), `cloudburst plan`, `explain/` and `bench/` — which
call it as a library (`tests/unit/test_planner_imports.py` reads the imports).

`plan.plan_capacity` runs its stages one way, each on the previous one's result:

1. prepare: drop the offerings the pool may not use (`regions`), size each offering's node
   (`node_size`), and find per pod the offerings it may land on; a pod none can host is
   unschedulable, with the reason;
2. place in flight: pods on the free room of nodes already on their way (first-fit
   decreasing);
3. partition: the rest in groups that may use the same offerings;
4. pack: each group into new nodes within the pool's remaining limits and each offering's
   count (`packing`, with `patterns`' column generation and `lp`'s covering LP over
   `shapes`);
5. floor: empty nodes up to the pool's `minNodes`;
6. fallbacks: each node's ranked fallback offerings, once every node is planned (an offering
   a later node used up is no node's fallback);
7. cost: the plan's hourly price.

Beside it: `recommend` ranks a catalog's offerings (`catalog`, the shipped prices) for a
shape, and `bound` is the assignment LP's lower bound that `cloudburst plan` and
bench/cost.py print. A module imports only the modules before it in that walk.
"""
