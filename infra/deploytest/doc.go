// Package deploytest checks the deployment material without an AWS
// account: it builds every Lambda door for linux/arm64 and the broker node,
// parses template.yaml and infra/broker.yaml (CloudFormation short-form tags
// such as !Ref and !Sub kept as tagged yaml.Node values), and checks them
// against the configuration structs in core/config. It also runs every
// deployment script with --help and without its required parameters.
package deploytest
