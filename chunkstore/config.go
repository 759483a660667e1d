package chunkstore

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cairnfs/cairn/chunkstore/cdc"
)

// ConfigVersion is the store format version this build writes and reads.
const ConfigVersion = 1

// Defaults for a new store. The chunker defaults are cdc.DefaultParams
// (8/32/128 KiB); see the README for the measurements behind them.
const (
	DefaultPackSize         = 16 << 20
	DefaultCompressionLevel = 1 // zstd "fastest"
	configKey               = "config"
)

// Config is a store's immutable configuration, kept in the backend object
// "config" and written once, at init.
type Config struct {
	Version     int               `json:"version"`
	ID          string            `json:"id"` // random, 32 hex digits; names the store's local cache
	Created     time.Time         `json:"created"`
	HashKey     string            `json:"hash_key"` // 64 hex digits: the keyed-BLAKE3 key of every ID
	Chunker     ChunkerConfig     `json:"chunker"`
	Compression CompressionConfig `json:"compression"`
	PackSize    int               `json:"pack_size"` // target pack object size in bytes
}

// ChunkerConfig fixes the content-defined chunking of a store. Changing it
// would change every chunk boundary, so it is never changed after init.
type ChunkerConfig struct {
	Algorithm     string `json:"algorithm"` // "fastcdc"
	Min           int    `json:"min"`       // bytes
	Avg           int    `json:"avg"`       // bytes, a power of two
	Max           int    `json:"max"`       // bytes
	Normalization int    `json:"normalization"`
	Seed          uint64 `json:"seed"` // gear table seed, derived from the hash key
}

// CompressionConfig says how blobs are compressed. Blobs that do not shrink
// are stored raw whatever this says.
type CompressionConfig struct {
	Algorithm string `json:"algorithm"` // "zstd" or "none"
	Level     int    `json:"level"`     // zstd level: 1 fastest .. 4 best
}

// InitOptions tune a new store. The zero value gives the defaults.
type InitOptions struct {
	// ChunkMin, ChunkAvg, ChunkMax override the chunk sizes in bytes
	// (default 8 KiB, 32 KiB, 128 KiB). Set all three or none.
	ChunkMin, ChunkAvg, ChunkMax int
	// CompressionLevel is the zstd level, 1 (fastest, default) to 4 (best);
	// -1 disables compression.
	CompressionLevel int
	// PackSize is the target pack size in bytes (default 16 MiB).
	PackSize int
}

// newConfig builds the config for a new store with a fresh random key.
func newConfig(opts InitOptions) (*Config, error) {
	var key Key
	if _, err := rand.Read(key[:]); err != nil {
		return nil, fmt.Errorf("generate store key: %w", err)
	}
	var sid [16]byte
	if _, err := rand.Read(sid[:]); err != nil {
		return nil, fmt.Errorf("generate store ID: %w", err)
	}
	seedSum := NewHasher(key).Sum([]byte("cairn fastcdc gear seed"))
	def := cdc.DefaultParams()
	cfg := &Config{
		Version: ConfigVersion,
		ID:      hex.EncodeToString(sid[:]),
		Created: time.Now().UTC().Truncate(time.Second),
		HashKey: hex.EncodeToString(key[:]),
		Chunker: ChunkerConfig{
			Algorithm: "fastcdc", Min: def.Min, Avg: def.Avg, Max: def.Max,
			Normalization: def.Normalization, Seed: binary.LittleEndian.Uint64(seedSum[:8]),
		},
		Compression: CompressionConfig{Algorithm: "zstd", Level: DefaultCompressionLevel},
		PackSize:    DefaultPackSize,
	}
	if opts.ChunkMin != 0 || opts.ChunkAvg != 0 || opts.ChunkMax != 0 {
		cfg.Chunker.Min, cfg.Chunker.Avg, cfg.Chunker.Max = opts.ChunkMin, opts.ChunkAvg, opts.ChunkMax
	}
	switch {
	case opts.CompressionLevel < 0:
		cfg.Compression = CompressionConfig{Algorithm: "none"}
	case opts.CompressionLevel > 0:
		cfg.Compression.Level = opts.CompressionLevel
	}
	if opts.PackSize != 0 {
		cfg.PackSize = opts.PackSize
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Key returns the decoded hash key.
func (c *Config) Key() (Key, error) {
	var k Key
	b, err := hex.DecodeString(c.HashKey)
	if err != nil || len(b) != len(k) {
		return k, fmt.Errorf("%w: store config: hash_key must be %d hex digits", ErrCorrupt, 2*len(k))
	}
	copy(k[:], b)
	return k, nil
}

// Validate checks a config for internal consistency.
func (c *Config) Validate() error {
	if c.Version != ConfigVersion {
		if c.Version > ConfigVersion {
			return fmt.Errorf("%w: store format version %d was written by a newer cairn (this one reads version %d); upgrade cairn", ErrVersion, c.Version, ConfigVersion)
		}
		return fmt.Errorf("%w: store format version %d is not valid", ErrCorrupt, c.Version)
	}
	if _, err := hex.DecodeString(c.ID); err != nil || len(c.ID) != 32 {
		return fmt.Errorf("%w: store config: id must be 32 hex digits", ErrCorrupt)
	}
	if _, err := c.Key(); err != nil {
		return err
	}
	if c.Chunker.Algorithm != "fastcdc" {
		return fmt.Errorf("%w: store config: unknown chunker %q", ErrVersion, c.Chunker.Algorithm)
	}
	if _, err := cdc.NewCutter(c.cdcParams()); err != nil {
		return fmt.Errorf("%w: store config: %v", ErrInvalid, err)
	}
	switch c.Compression.Algorithm {
	case "none":
	case "zstd":
		if c.Compression.Level < 1 || c.Compression.Level > 4 {
			return fmt.Errorf("%w: store config: zstd level %d out of range 1..4", ErrInvalid, c.Compression.Level)
		}
	default:
		return fmt.Errorf("%w: store config: unknown compression %q", ErrVersion, c.Compression.Algorithm)
	}
	if c.PackSize < 1<<20 || c.PackSize > 1<<30 {
		return fmt.Errorf("%w: store config: pack_size %d out of range 1 MiB..1 GiB", ErrInvalid, c.PackSize)
	}
	return nil
}

// encodeConfig returns the canonical bytes of the config object.
func encodeConfig(c *Config) ([]byte, error) {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// decodeConfig parses and validates a config object.
func decodeConfig(data []byte) (*Config, error) {
	var probe struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: store config is not valid JSON: %v", ErrCorrupt, err)
	}
	if probe.Version > ConfigVersion {
		return nil, fmt.Errorf("%w: store format version %d was written by a newer cairn (this one reads version %d); upgrade cairn", ErrVersion, probe.Version, ConfigVersion)
	}
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%w: store config: %v", ErrCorrupt, err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) cdcParams() cdc.Params {
	return cdc.Params{
		Min: c.Chunker.Min, Avg: c.Chunker.Avg, Max: c.Chunker.Max,
		Normalization: c.Chunker.Normalization, Seed: c.Chunker.Seed,
	}
}
