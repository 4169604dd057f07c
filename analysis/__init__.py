"""Records to answers: tables (`analysis.records`), figures (`analysis.figures`) and the report
(`python -m analysis report <results_dir>`)."""
