package benchplot

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// FiguresPath is where a benchmark keeps its figures: BENCH_OUT, else bin/bench/<file> of the repository, for a
// benchmark package in test/bench/<name> (go test runs it in its own folder). Plots go beside the file.
func FiguresPath(file string) string {
	if out := os.Getenv("BENCH_OUT"); out != "" {
		return out
	}
	return filepath.Join("..", "..", "..", "bin", "bench", file)
}

// WriteFigures writes v to path as indented JSON, making its folder.
func WriteFigures(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// ReadFigures reads the figures an earlier run wrote to path into v.
func ReadFigures(path string, v any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("no figures of an earlier run: %w", err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("figures in %s: %w", path, err)
	}
	return nil
}
