"""Validation: is a cluster fit for a training run? (docs/validation.md)

- ``nccl_log``: read nccl-tests / rccl-tests output (text, and the ``-J`` JSON report) into ``models``;
- ``gate``: judge a result (correctness, transport, large-message busbw against a floor or baseline);
- ``report``: JSON, Markdown and the busbw plot;
- ``slurm``: the command lines gpufleet sends to the login node, and the runner that sends them;
- ``health``: judges what the node check (``gpufleet.node.node_health``, run on the nodes) reports;
- ``bisect``: find the node(s) behind a failing cluster-wide run;
- ``suite``: ``run_suite(spec, inventory, executor, out_dir)``, all of the above in order.
"""
