// Package deploytest checks the deployment material without an AWS
// account: it builds every Lambda door for linux/arm64 and the broker node,
// parses template.yaml, infra/broker.yaml and infra/foundation.yaml
// (CloudFormation short-form tags such as !Ref and !Sub kept as tagged
// yaml.Node values), and checks them against the configuration structs in
// core/config: references resolve, no secret is a parameter, the funduq
// secret the foundation composes is one the binaries accept, and the
// foundation's outputs feed the other stacks' parameters through
// scripts/deploy (run against stand-in aws and sam commands). It also runs
// every deployment script with --help and without its required parameters,
// and runs every Lambda bootstrap under the Lambda Runtime Interface
// Emulator with the events API Gateway sends (rie_test.go).
package deploytest
