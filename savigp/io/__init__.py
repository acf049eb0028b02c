"""Files in and out: CSV tables (:mod:`~savigp.io.csv_data`), atomic writes
(:mod:`~savigp.io.atomic_files`), checked output paths (:mod:`~savigp.io.output_paths`) and plots
(:mod:`~savigp.io.plotting`, the ``plots`` extra). Nothing is imported here, so that the command's
parser reads none of them before it needs them (and no torch)."""
