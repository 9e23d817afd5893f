-- kwh export to CSV: how a cell is written. csv_decimal(x): a float as fixed-point text with at most 15 significant digits (a double's honest precision) and at most 9 decimals, trailing zeros cut: 11872.5, 66504679296000, 0.398521054, never 1e-05 (spreadsheets misread those); inf and nan as DuckDB writes them. csv_text(x): text a spreadsheet would run as a formula (it starts with =, +, -, @, a tab or a carriage return: OWASP's "CSV Injection") gets a leading single quote, unless it is a plain number (-1.5, +7), which runs nothing.
CREATE OR REPLACE TEMP MACRO csv_fixed(x) AS
    printf('%.' || CAST(CASE WHEN x = 0 THEN 0
                             ELSE least(9, greatest(0, 14 - TRY_CAST(floor(log10(abs(x))) AS INTEGER))) END AS VARCHAR) || 'f', x);
CREATE OR REPLACE TEMP MACRO csv_decimal(x) AS
    CASE WHEN isfinite(x) THEN (CASE WHEN contains(csv_fixed(x), '.') THEN rtrim(rtrim(csv_fixed(x), '0'), '.')
                                     ELSE csv_fixed(x) END)
         ELSE CAST(x AS VARCHAR) END;
CREATE OR REPLACE TEMP MACRO csv_text(x) AS
    CASE WHEN regexp_matches(x, '^[=+@\t\r-]')
              AND NOT regexp_full_match(x, '[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?')
         THEN chr(39) || x ELSE x END;
