// `subternary model gen` and `subternary model quantize` (argv[0] is "gen"/"quantize").
#ifndef ST_CLI_MODEL_TOOLS_H
#define ST_CLI_MODEL_TOOLS_H

int st_model_gen_main(int argc, char **argv);
int st_model_quantize_main(int argc, char **argv);

#endif
