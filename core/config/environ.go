package config

import "github.com/caarlos0/env/v11"

// FromList turns an os.Environ()-style list into the map Parse* read. The
// binary calls it with os.Environ() at its edge.
func FromList(list []string) map[string]string { return env.ToMap(list) }
