-- kwh summary: the fleet's first fixes (LIMIT ?) by estimated time saved (what_to_fix_first); saves says whether a saving is GPU kernel time or GPU idle time (its basis column says how it was measured).
SELECT rank, signal, subject, model_list AS models, round(est_time_saved_ns / 1e3, 1) AS saved_us, saves,
       time_basis, fix
FROM what_to_fix_first ORDER BY rank LIMIT ?
