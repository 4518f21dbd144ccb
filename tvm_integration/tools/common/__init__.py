"""The tools' shared ground: what several commands use and no single command owns.

- `verdicts`: a case's or a model's verdicts and the stages a failure is found at;
- `runs`: running a build (`run_vm`), exported libraries in a fresh process (`run_fresh`),
  a lost GPU context, the device a run is on;
- `stderr_log`: what a case writes on stderr, captured; a process's last words;
- `error_line`: an exception as one line;
- `arrays`: argument and output arrays in .npz files, and the checks on a path given;
- `retries`: the lost-worker policy of campaigns on a cluster;
- `torch_peer`: torch set up as the bench's peer (cuBLAS, cuDNN, TF32 off).

The comparison of a result with its reference is not here but in the core,
`simaccel.compare`: every tool and the tests judge results by that one rule. So is the
reading of a JSON file (`simaccel.json_file.read_json`), which `simaccel trace` shares.
"""
