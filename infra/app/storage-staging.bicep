// One staging account (a scale unit): the HTTP produce function puts each producer batch on
// one of its queues; the queue-triggered writer drains them into the vault. A storage
// account serves about 20,000 messages/s and a single queue about 2,000 messages/s, so the
// number of queues per account and the number of accounts are both parameters.
// Claim-check blobs live in the vault account, so a staging account only needs queues.

@description('Name of the staging storage account (3-24 lowercase letters and digits).')
@minLength(3)
@maxLength(24)
param name string

@description('Azure region of the account.')
param location string

@description('Tags applied to the account.')
param tags object

@description('Reachable only through private endpoints (vnetEnabled): public network access off.')
param privateOnly bool

@description('Redundancy SKU of the staging account (messages stay here only until written to the vault).')
@allowed([
  'Standard_LRS'
  'Standard_ZRS'
])
param skuName string

@description('Prefix of the staging queue names: queues are <prefix>-0 .. <prefix>-<count-1> (VAULT_QUEUE_PREFIX).')
param queuePrefix string

@minValue(1)
@maxValue(64)
@description('Number of staging queues in this account (VAULT_STAGING_QUEUES).')
param queueCount int

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: skuName
  }
  properties: {
    accessTier: 'Hot'
    isHnsEnabled: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    // Keyless: Entra ID (RBAC) only.
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    allowBlobPublicAccess: false
    allowCrossTenantReplication: false
    publicNetworkAccess: privateOnly ? 'Disabled' : 'Enabled'
    networkAcls: {
      // Isolated: no exception for "trusted Azure services" either; the app comes in
      // through its private endpoints.
      bypass: privateOnly ? 'None' : 'AzureServices'
      defaultAction: privateOnly ? 'Deny' : 'Allow'
    }
  }
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' = {
  parent: account
  name: 'default'
}

resource queues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = [for i in range(0, queueCount): {
  parent: queueService
  name: '${queuePrefix}-${i}'
}]

// The Functions queue trigger moves a message here after maxDequeueCount failed attempts;
// it would create the queue itself, but provisioning it makes it visible and monitorable.
resource poisonQueues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = [for i in range(0, queueCount): {
  parent: queueService
  name: '${queuePrefix}-${i}-poison'
}]

output name string = account.name
output id string = account.id
output queueEndpoint string = account.properties.primaryEndpoints.queue
