-- Libraries by real GPU time (kernel_time) in the selection, biggest first: the order that fixes their colours in every chart.
SELECT library FROM kernel_time WHERE {selected_models} GROUP BY library ORDER BY sum(gpu_time_ns) DESC
